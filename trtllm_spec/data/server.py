"""A real OpenAI-compatible server on this machine: llama.cpp through ``llama-cpp-python[server]`` (our ``serve``
extra), serving the GGUF a model asset ships (``assets serve smollm2-135m --port P``, and the tests' fixture).

The server is a child process on 127.0.0.1 by default; ``LocalServer`` waits until ``GET /v1/models`` answers and
stops its own process (terminate, then kill) when closed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError


def serve_command(gguf: Path, *, host: str = "127.0.0.1", port: int = 8000, threads: int = 2, ctx: int = 4096,
                  alias: str | None = None) -> list[str]:
    """``python -m llama_cpp.server`` over ``gguf`` (its chat template comes from the GGUF's metadata). Concurrent
    requests queue: llama-cpp-python's default ``interrupt_requests`` ends a running stream early (``data: [DONE]``
    with no finish_reason) as soon as another request arrives (llama_cpp/server/app.py, get_event_publisher)."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", host, "--port", str(port),
           "--n_threads", str(threads), "--n_ctx", str(ctx), "--interrupt_requests", "False"]
    return cmd + (["--model_alias", alias] if alias else [])


def require_llama_cpp() -> None:
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        raise DependencyMissing("serving a GGUF needs llama-cpp-python's server: pip install 'trtllm-spec[serve]' "
                                "(compiles llama.cpp, ~7 minutes on 2 cores)")


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


class LocalServer(ServerProcess):
    title = "the llama.cpp server"
    ready_path = "/v1/models"

    def __init__(self, gguf: Path, *, host: str = "127.0.0.1", port: int = 8000, threads: int = 2, ctx: int = 4096,
                 alias: str | None = None, log_file: Path | None = None):
        require_llama_cpp()
        if not Path(gguf).is_file():
            raise UserError(f"{gguf} does not exist; 'trtllm-spec assets serve' fetches the asset's GGUF itself")
        super().__init__(serve_command(gguf, host=host, port=port, threads=threads, ctx=ctx, alias=alias),
                         f"http://{host}:{port}", log_file)

    def ready(self) -> bool:
        return _answers(self.url)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
            return isinstance(json.loads(r.read()), dict)
    except (urllib.error.URLError, OSError, ValueError):
        return False
