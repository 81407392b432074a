"""``assets serve`` stops on SIGINT / SIGTERM in every phase and never leaves its llama-server behind, even when it is
killed outright (issue 37: under load a SIGINT did not stop it within 30 s and its llama-server outlived it by an
hour and a half).

Phases, each reached as an event (pause points of conftest's sitecustomize, never a timer): ``starting`` (the GGUF
and the build resolved, no server process yet), ``loading`` (llama-server runs but has not answered /health; the
child waits in its readiness loop) and ``serving`` (it answers /v1/models). In each, SIGINT and SIGTERM end
``assets serve`` and the server, and SIGKILL of ``assets serve`` itself ends the server too (PR_SET_PDEATHSIG: the
kernel's doing, no handler of ours runs).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.reliability.conftest import LOCAL_FAKES, subprocess_env

EVENT_S = 240  # the longest a phase may take to be reached on a loaded machine (not a kill point: an upper bound)
GONE_S = 30  # a stopped server is gone well within this (5 s grace, then SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _servers_on(port: int) -> list[int]:
    """Live llama-server processes started for ``port`` (any parent)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"llama-server") and b"--port" in argv and \
                argv[argv.index(b"--port") + 1:argv.index(b"--port") + 2] == [str(port).encode()] and _alive(int(d.name)):
            out.append(int(d.name))
    return out


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            return json.loads(r.read())["data"][0]["id"] == "smollm2-135m"
    except OSError:
        return False


class Serve:
    """``python -m trtllm_spec assets serve smollm2-135m`` as a child, its stderr read line by line."""

    def __init__(self, port: int, env: dict[str, str], cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "trtllm_spec", "assets", "serve", "smollm2-135m",
                                      "--port", str(port)], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self._t = threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")), daemon=True)
        self._t.start()

    def wait_line(self, pattern: str) -> re.Match:
        end = time.monotonic() + EVENT_S
        while time.monotonic() < end:
            for line in list(self.err):
                m = re.search(pattern, line)
                if m:
                    return m
            assert self.proc.poll() is None, f"assets serve ended ({self.proc.returncode}) before {pattern!r}:\n" \
                + "".join(self.err)
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {EVENT_S} s:\n" + "".join(self.err))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._t.join(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["sigint", "sigterm", "sigkill"])
@pytest.mark.parametrize("phase", ["starting", "loading", "serving"])
def test_assets_serve_stops_in_every_phase_and_leaves_no_server(phase, sig, smollm2, llama_server_bin, tmp_path):
    from trtllm_spec.serve.llamacpp import free_port

    port = free_port()
    LOCAL_FAKES.add(("127.0.0.1", port))
    env = subprocess_env(tmp_path) | {"TEST_ALLOW_PORTS": str(port)}
    if phase != "serving":
        env["TEST_PAUSE_SERVE"] = phase
    child = Serve(port, env, REPO)
    try:
        pid = None
        if phase == "starting":
            child.wait_line(r"PAUSED-SERVE starting")
            assert _servers_on(port) == []
        elif phase == "loading":
            pid = int(child.wait_line(r"PAUSED-SERVE loading pid (\d+)").group(1))
        else:
            pid = int(child.wait_line(r"serving smollm2-135m at .* \(pid (\d+)\)").group(1))
            end = time.monotonic() + EVENT_S
            while not _answers(port):
                assert time.monotonic() < end, "the server never answered"
                time.sleep(0.2)
        assert pid is None or _alive(pid)
        child.proc.send_signal(sig)
        rc = child.proc.wait(timeout=GONE_S)
        expected = -signal.SIGKILL if sig == signal.SIGKILL else 0  # a stop asked for is a clean end
        assert rc == expected, f"exit {rc}, expected {expected}:\n" + "".join(child.err)
        assert "Traceback" not in "".join(child.err), "".join(child.err)
        end = time.monotonic() + GONE_S  # SIGKILL of the parent: the kernel's PDEATHSIG ends the server
        while (pid is not None and _alive(pid)) or _servers_on(port):
            assert time.monotonic() < end, f"llama-server {pid} outlived assets serve ({sig!r} while {phase})"
            time.sleep(0.1)
        assert not _answers(port)
    finally:
        child.close()
        for left in _servers_on(port):  # never leave one behind, even when the test fails
            os.kill(left, signal.SIGKILL)
        LOCAL_FAKES.discard(("127.0.0.1", port))
