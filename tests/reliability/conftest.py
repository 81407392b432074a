"""Reliability fixtures: no network for any test here, and checks that a failure is clean.

A clean failure: the expected exit code, exactly one ``error:`` line that names the field or file (and the
fix), no traceback, and nothing new or changed under the test's working folder (no half-written output).
Subprocess tests get the same socket block through a ``sitecustomize.py`` put on their PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.conftest import REPO

NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)
# (host, port) of the fake servers a test started on 127.0.0.1 (tests/reliability/fake_openai.py): the only IP
# addresses a reliability test may connect to
LOCAL_FAKES: set[tuple[str, int]] = set()


def _is_fake(address) -> bool:
    return isinstance(address, tuple) and len(address) >= 2 and (str(address[0]), address[1]) in LOCAL_FAKES


class NetworkUsed(OSError):
    """Raised instead of opening a network connection."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every reliability test runs offline: IP sockets refuse to connect and the attempt fails the test.
    Local IPC (AF_UNIX, socketpair) stays allowed."""
    attempts: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_create_connection = socket.create_connection

    def _refuse(what: str) -> NetworkUsed:
        attempts.append(what)
        return NetworkUsed(f"network use is not allowed here: {what}")

    def connect(self, address):
        if self.family in NETWORK_FAMILIES and not _is_fake(address):
            raise _refuse(f"connect {address!r}")
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family in NETWORK_FAMILIES and not _is_fake(address):
            raise _refuse(f"connect_ex {address!r}")
        return real_connect_ex(self, address)

    def create_connection(address, *a, **kw):
        if _is_fake(address):
            return real_create_connection(address, *a, **kw)
        raise _refuse(f"create_connection {address!r}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    yield attempts
    assert not attempts, f"the test used the network: {attempts}"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a busy 2-core machine: one intra-op thread is ~100x faster than two contending ones, and
    in-process runs then compute exactly what the children (OMP_NUM_THREADS=1) compute."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- subprocesses --------------------------------------------------------------------------------------------

SITECUSTOMIZE = textwrap.dedent('''
    # Put on a child's PYTHONPATH by tests/reliability: IP sockets refuse to connect (and say so on stderr), except
    # to the 127.0.0.1 ports a test names in TEST_ALLOW_PORTS, and optional pause points make kill points events the
    # code reaches, never time passing: the child prints a marker and then waits for the test's signal (a loaded
    # machine cannot let it run past the point).
    import os, signal, socket, sys, time

    # a child started from a background job of a non-interactive shell inherits SIGINT ignored (and Python then keeps
    # it ignored): the tests' Ctrl-C must reach it as it would from a terminal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    _allowed = {int(p) for p in os.environ.get("TEST_ALLOW_PORTS", "").split(",") if p}
    _real = socket.socket.connect
    _real_create = socket.create_connection
    def _local(address):
        return isinstance(address, tuple) and address[0] in ("127.0.0.1", "localhost") and address[1] in _allowed
    def _blocked(address):
        sys.stderr.write("NETWORK-USE-BLOCKED %r\\n" % (address,))
        return OSError("network use is not allowed in this test")
    def _connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            raise _blocked(address)
        return _real(self, address)
    def _create_connection(address, *a, **kw):
        if _local(address):
            return _real_create(address, *a, **kw)
        raise _blocked(address)
    socket.socket.connect = _connect
    socket.create_connection = _create_connection

    def _pause(marker):
        """Print ``marker`` and wait for the test's signal (SIGINT / SIGTERM raise here, SIGKILL ends the process);
        TEST_PAUSE_S: resume by itself after that many seconds instead (a build holding its lock a while)."""
        sys.stderr.write(marker + "\\n")
        sys.stderr.flush()
        if os.environ.get("TEST_PAUSE_S"):
            time.sleep(float(os.environ["TEST_PAUSE_S"]))
            return
        end = time.monotonic() + 600
        while time.monotonic() < end:
            time.sleep(0.2)
        sys.stderr.write("PAUSE-EXPIRED: no signal came within 600 s\\n")
        os._exit(99)

    if os.environ.get("TEST_PAUSE_AFTER_STAGE"):
        import trtllm_spec.stages.pipeline as _pipeline
        def _pausing(fn):
            def stage(ctx):
                result = fn(ctx)
                _pause("PAUSED-AFTER-STAGE %s" % fn.__name__)
                return result
            stage.__name__ = fn.__name__
            return stage
        _pipeline.STAGES[:] = [_pausing(s) if s.__name__ == os.environ["TEST_PAUSE_AFTER_STAGE"] else s
                               for s in _pipeline.STAGES]

    if os.environ.get("TEST_PAUSE_AT_STEP"):  # after train step N (the checkpoints of earlier steps are written)
        from trtllm_spec.train import trainer as _trainer
        _step = _trainer.Trainer.train_step
        def _step_then_pause(self):
            out = _step(self)
            if self.step == int(os.environ["TEST_PAUSE_AT_STEP"]):
                _pause("PAUSED-AT-STEP %d" % self.step)
            return out
        _trainer.Trainer.train_step = _step_then_pause

    if os.environ.get("TEST_PAUSE_SERVE"):  # assets serve: "starting" (before the server process exists) or
        from trtllm_spec.serve import process as _server  # "loading" (it runs but does not answer yet)
        _start, _ready = _server.ServerProcess.start, _server.ServerProcess.ready
        def _start_paused(self, *a, **kw):
            if os.environ["TEST_PAUSE_SERVE"] == "starting":
                _pause("PAUSED-SERVE starting")
            return _start(self, *a, **kw)
        def _not_ready(self):
            if self.proc is None:
                return False  # the check that nothing serves on the port yet
            if not getattr(self, "_test_paused", False):
                self._test_paused = True
                _pause("PAUSED-SERVE loading pid %d" % self.proc.pid)
            return False
        _server.ServerProcess.start = _start_paused
        if os.environ["TEST_PAUSE_SERVE"] == "loading":
            import trtllm_spec.serve.llamacpp as _native
            _native.NativeServer.ready = _not_ready
''')


def subprocess_env(tmp: Path, cache: Path | None = None) -> dict[str, str]:
    """Environment for a ``python -m trtllm_spec`` child: offline, sockets blocked, its own asset cache."""
    site = tmp / "_netblock"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if cache is not None:
        env["TRTLLM_SPEC_CACHE"] = str(cache)
    return env


def cli_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "trtllm_spec", *[str(a) for a in args]]


def start_cli(args: Iterable[object], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cli_command(*args), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_cli(args: Iterable[object], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(cli_command(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert "NETWORK-USE-BLOCKED" not in proc.stderr, proc.stderr
    return proc


# ---- clean failures -------------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: folders as 'dir', links as their target, files as their sha256."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def error_line(output: str) -> str:
    """The one error line of a failed command (ours: 'error: ...', click's usage errors: 'Error: ...')."""
    lines = output.splitlines()
    idx = [i for i, line in enumerate(lines) if line.startswith(("error:", "Error:"))]
    assert len(idx) == 1, f"expected exactly one error line:\n{output}"
    follow = lines[idx[0] + 1:]
    assert not (follow and follow[0].startswith("       ")), f"the error message spans several lines:\n{output}"
    return lines[idx[0]]


def assert_clean_failure(output: str, exit_code: int, expected_code: int, names: Iterable[str],
                         before: dict[str, str] | None = None, after: dict[str, str] | None = None) -> str:
    """Exit code, one error line naming every string of ``names`` (case-insensitive), no traceback, and the
    watched folder unchanged (``before`` == ``after``). Returns the error line."""
    assert exit_code == expected_code, f"exit {exit_code}, expected {expected_code}:\n{output}"
    assert "Traceback" not in output, output
    line = error_line(output)
    for name in names:
        assert name.lower() in line.lower(), f"{name!r} not named in: {line}"
    if before is not None:
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
        assert not (added or removed or changed), f"left behind: added {added}, removed {removed}, changed {changed}"
    return line
