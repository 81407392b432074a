"""The lifecycle of a server child process on this machine (127.0.0.1 by default): started, waited on until it
answers, stopped (terminate, then kill) when closed. ``serve.llamacpp.NativeServer`` (native llama-server: ``assets
serve``, the tests' server, ``measure llamacpp``) and ``serve.triton.TritonServer`` (the real tritonserver of the Triton preview) are its subclasses.

No server outlives us, in any phase: Ctrl-C / SIGTERM while it starts (our ``start`` loop), while it loads (not yet
answering) or while it serves all end in ``stop``, which a second signal cannot cut short (the kill is in a
``finally``); SIGINT and SIGTERM are held back between the fork and the moment we hold the child's handle; and
where we are killed outright (SIGKILL, a crash) the kernel ends the child: on Linux it starts with
``PR_SET_PDEATHSIG`` = SIGKILL (prctl(2)), checked against the race of a parent that died before the call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trtllm_spec.errors import UserError

STOP_GRACE_S = 5.0  # what a server gets to shut down on SIGTERM before it is killed
_HELD = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int):
    """A ``preexec_fn`` (runs in the child between fork and exec): unblock the signals the parent held back, and on
    Linux ask the kernel for SIGKILL when the parent dies; a parent already gone (the fork outlived it) ends it.
    The kernel watches the thread that forked: start a server from the thread that keeps it (every caller does).
    libc is looked up here, in the parent: nothing is imported between fork and exec."""
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    kill = int(signal.SIGKILL)

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
        if prctl is not None and prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0) == 0 and os.getppid() != parent:
            os._exit(1)  # (a prctl refused, e.g. by a seccomp profile, leaves the parent's own stop as the guard)
    return preexec


class ServerProcess:
    """A server subprocess on this machine: ``start`` launches ``cmd`` and waits until ``ready()``, ``stop`` (and
    leaving the ``with`` block, Ctrl-C while it starts included) ends it, so no server is ever orphaned.
    Subclasses say what ready means (``ready``, ``ready_path``) and name the server in messages (``title``)."""

    title = "the server"
    ready_path = ""
    poll_s = 0.5
    stop_grace_s = STOP_GRACE_S  # a server with a longer shutdown of its own (vLLM's keeper) says so

    def __init__(self, cmd: list[str], url: str, log_file: Path | None):
        self.cmd, self.url, self.log_file = cmd, url, log_file
        self.proc: subprocess.Popen | None = None

    def ready(self) -> bool:
        raise NotImplementedError

    def popen_kwargs(self) -> dict:
        """Extra ``subprocess.Popen`` arguments (environment, session) of a subclass."""
        return {}

    def start(self, timeout_s: float = 180.0):
        if self.ready():
            raise UserError(f"{self.url} already answers: something else serves on that port; choose another --port")
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)  # a signal now would lose the child's handle
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent(os.getpid()), **self.popen_kwargs())
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # the child holds its own descriptor
        deadline = time.monotonic() + timeout_s
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal that came meanwhile is raised here
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise UserError(f"{self.title} exited with code {self.proc.returncode} before answering "
                                    f"({' '.join(self.cmd)}); see {self.log_file or 'its output'}")
                if self.ready():
                    return self
                time.sleep(self.poll_s)
        except BaseException:  # Ctrl-C while it starts: no orphaned server
            self.stop()
            raise
        self.stop()
        raise UserError(f"{self.title} did not answer {self.url}{self.ready_path} within {timeout_s:.0f} s")

    def stop(self) -> None:
        """SIGTERM, ``stop_grace_s`` to exit, then SIGKILL; a signal arriving meanwhile (a second Ctrl-C) skips the
        grace, never the kill."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.terminate()
            proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def post_json(self, path: str, body: dict, timeout_s: float, what: str = "a completion") -> dict:
        """``POST url+path`` with a JSON body, the JSON reply; a refusal or no answer is one line naming the server
        (and, where the server process has exited, that it did: ``exit_note``)."""
        import json
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise UserError(f"{self.title} refused {what} ({exc.code}: {exc.read()[:300]!r})") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise UserError(f"{self.title} at {self.url} did not answer {what} ({exc}){self.exit_note()}") from None

    def exit_note(self) -> str:
        """``; it exited with code N`` where the server process has ended, else nothing."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"; it exited with code {self.proc.returncode}"
        return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def http_get(url: str, timeout: float = 2.0) -> str | None:
    """The body of ``GET url`` as text, or None where nothing answers it (a server not up yet, a refused port)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError, ValueError):
        return None
