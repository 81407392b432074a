"""Native ``llama-server`` as a child process: the target GGUF, optionally a drafter GGUF with its speculative type.

Options (``common/arg.cpp`` of the vendored commit): ``-md`` the draft GGUF, ``--spec-type`` (draft-eagle3,
draft-dflash, draft-simple ...), ``--spec-draft-n-max`` D, ``--spec-draft-n-min 0`` and ``--spec-draft-p-min 0``
(draft exactly D tokens every step, the chain our reference decoder runs; p_min > 0 would stop a chain early),
``-np`` parallel slots, ``--metrics`` for ``/metrics`` (``llamacpp:spec_decode_*`` counters). ``/health``
answers 200 once the model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import UserError
from trtllm_spec.serve.process import ServerProcess, http_get


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


class NativeServer(ServerProcess):
    """``with NativeServer(...) as s:`` starts llama-server, waits for /health, and stops it on exit."""

    title = "llama-server"
    ready_path = "/health"
    poll_s = 0.3

    def __init__(self, binary: Path, target_gguf: Path, *, draft: DraftSpec | None = None, host: str = "127.0.0.1",
                 port: int = 8000, threads: int = 2, ctx: int = 4096, parallel: int = 1, alias: str | None = None,
                 log_file: Path | None = None):
        super().__init__(server_command(binary, target_gguf, draft=draft, host=host, port=port, threads=threads,
                                        ctx=ctx, parallel=parallel, alias=alias), f"http://{host}:{port}", log_file)
        self.spec_type = draft.spec_type if draft is not None else None

    def ready(self) -> bool:
        return http_get(f"{self.url}/health") is not None

    def start(self, timeout_s: float = 300.0) -> NativeServer:
        return super().start(timeout_s)

    # ---- requests ------------------------------------------------------------------------------------------
    def complete(self, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 timeout_s: float = 600.0, top_p: float = 1.0, json_schema: dict | None = None) -> dict:
        """``POST /completion`` with the prompt as token ids (no template or BOS added), no prompt cache reuse.
        Sampling is the plain softmax(logits / T) with ``top_p`` (llama-server's other samplers off: top_k 0,
        min_p 0, typical 1), the distribution our decoder samples; ``json_schema``: llama-server converts it to
        a grammar applied to every sampled token, speculative verification included (tools/server/README.md)."""
        body = {"prompt": prompt_ids, "n_predict": max_new_tokens, "temperature": temperature, "seed": seed,
                "cache_prompt": False, "return_tokens": True, "stream": False, "top_k": 0, "min_p": 0.0,
                "top_p": top_p, "typical_p": 1.0}
        if json_schema is not None:
            body["json_schema"] = json_schema
        return self.post_json("/completion", body, timeout_s)

    def metrics(self) -> dict[str, float]:
        text = http_get(f"{self.url}/metrics")
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
