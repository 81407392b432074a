"""The lifecycle of a server child process on this machine (127.0.0.1 by default): started, waited on until it
answers, stopped (terminate, then kill) when closed. ``llamacpp.server.NativeServer`` (native llama-server: ``assets
serve``, the tests' server, ``measure llamacpp``) is the one subclass today.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from trtllm_spec.errors import UserError


class ServerProcess:
    """A server subprocess on this machine: ``start`` launches ``cmd`` and waits until ``ready()``, ``stop`` (and
    leaving the ``with`` block, Ctrl-C while it starts included) ends it, so no server is ever orphaned.
    Subclasses say what ready means (``ready``, ``ready_path``) and name the server in messages (``title``)."""

    title = "the server"
    ready_path = ""
    poll_s = 0.5

    def __init__(self, cmd: list[str], url: str, log_file: Path | None):
        self.cmd, self.url, self.log_file = cmd, url, log_file
        self.proc: subprocess.Popen | None = None

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float = 180.0):
        if self.ready():
            raise UserError(f"{self.url} already answers: something else serves on that port; choose another --port")
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        try:
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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
