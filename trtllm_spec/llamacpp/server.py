"""Native ``llama-server`` as a child process: the target GGUF, optionally a drafter GGUF with its speculative type.

Options (``common/arg.cpp`` of the vendored commit): ``-md`` the draft GGUF, ``--spec-type`` (draft-eagle3,
draft-dflash, draft-simple ...), ``--spec-draft-n-max`` D, ``--spec-draft-n-min 0`` and ``--spec-draft-p-min 0``
(draft exactly D tokens every step, the chain our reference decoder runs; p_min > 0 would stop a chain early),
``-np`` parallel slots, ``--metrics`` for ``/metrics`` (``llamacpp:spec_decode_*`` counters). ``/health``
answers 200 once the model is loaded.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import UserError


@dataclass(frozen=True)
class DraftSpec:
    gguf: Path
    spec_type: str
    draft_len: int


def server_command(binary: Path, target_gguf: Path, *, draft: DraftSpec | None = None, host: str = "127.0.0.1",
                   port: int = 8000, threads: int = 2, ctx: int = 4096, parallel: int = 1,
                   alias: str | None = None) -> list[str]:
    cmd = [str(binary), "-m", str(target_gguf), "--host", host, "--port", str(port), "-t", str(threads),
           "-c", str(ctx * parallel), "-np", str(parallel), "--metrics", "--no-webui"]
    if alias:
        cmd += ["--alias", alias]
    if draft is not None:
        cmd += ["-md", str(draft.gguf), "--spec-type", draft.spec_type, "--spec-draft-n-max", str(draft.draft_len),
                "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(threads)]
    return cmd


class NativeServer:
    """``with NativeServer(...) as s:`` starts llama-server, waits for /health, and stops it on exit."""

    def __init__(self, binary: Path, target_gguf: Path, *, draft: DraftSpec | None = None, host: str = "127.0.0.1",
                 port: int = 8000, threads: int = 2, ctx: int = 4096, parallel: int = 1, alias: str | None = None,
                 log_file: Path | None = None):
        self.url = f"http://{host}:{port}"
        self.cmd = server_command(binary, target_gguf, draft=draft, host=host, port=port, threads=threads, ctx=ctx,
                                  parallel=parallel, alias=alias)
        self.spec_type = draft.spec_type if draft is not None else None
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 300.0) -> NativeServer:
        if _get(f"{self.url}/health") is not None:
            raise UserError(f"{self.url} already answers: something else serves on that port; choose another --port")
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise UserError(f"llama-server exited with code {self.proc.returncode} before answering "
                                    f"({' '.join(self.cmd)}); see {self.log_file or 'its output'}")
                if _get(f"{self.url}/health") is not None:
                    return self
                time.sleep(0.3)
        except BaseException:
            self.stop()
            raise
        self.stop()
        raise UserError(f"llama-server did not answer {self.url}/health within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> NativeServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- requests ------------------------------------------------------------------------------------------
    def complete(self, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 timeout_s: float = 600.0) -> dict:
        """``POST /completion`` with the prompt as token ids (no template or BOS added), no prompt cache reuse."""
        body = {"prompt": prompt_ids, "n_predict": max_new_tokens, "temperature": temperature, "seed": seed,
                "cache_prompt": False, "return_tokens": True, "stream": False}
        req = urllib.request.Request(f"{self.url}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise UserError(f"llama-server refused a completion ({exc.code}: {exc.read()[:300]!r})") from None
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"llama-server at {self.url} did not answer a completion ({exc})") from None

    def metrics(self) -> dict[str, float]:
        text = _get(f"{self.url}/metrics")
        if text is None:
            raise UserError(f"{self.url}/metrics did not answer (llama-server runs with --metrics here)")
        return parse_prometheus(text)


def parse_prometheus(text: str) -> dict[str, float]:
    """``name{labels} value`` lines -> {'name{labels}': value}; comments skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError, ValueError):
        return None
