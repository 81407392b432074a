"""A real Triton Inference Server on this machine: the ``tritonserver`` binary (server 2.51) with its python
backend that the PyPI wheel ``nvidia-pytriton`` 0.7.0 ships, started the way PyTriton starts it.

The wheel lives in its own venv (``scripts/setup.sh --dev`` makes ``<cache>/triton-venv``; ``$TRTLLM_SPEC_TRITON_VENV``
overrides): it pins numpy < 2, and the python backend's stub fails on the first text input with numpy 2. Start-up:
a private workspace holds a copy of the wheel's ``backends/python`` with the stub for the venv's Python beside
``libtriton_python.so`` (that stub links ``libpython3.X.so``: Debian ``libpython3.11``), the wheel's
``nvidia_pytriton.libs`` go on ``LD_LIBRARY_PATH``, the venv's ``bin`` first on ``PATH`` (the stub's models import
numpy from there), HTTP and gRPC on 127.0.0.1 at free ports, metrics off, auto-complete off (as NVIDIA's
``launch_triton_server.py`` runs it, so ``config.pbtxt`` is what Triton uses).

``TritonServer`` waits for ``/v2/health/ready`` under a deadline and reports a model that failed (or is still
loading at the deadline) by name with Triton's reason; stopping it (also on Ctrl-C / SIGTERM while it starts)
ends the server, every process of its session (the python stubs and what a model started) and the python
backend's shared-memory regions in ``/dev/shm`` (a prefix of our own, so only ours are removed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError
from trtllm_spec.serve.process import ServerProcess

WHEEL = "nvidia-pytriton==0.7.0"
SETUP_HINT = "run scripts/setup.sh --dev (it installs the nvidia-pytriton wheel into <cache>/triton-venv)"
SHM = Path("/dev/shm")


def triton_venv() -> Path:
    """Where the Triton venv is: ``$TRTLLM_SPEC_TRITON_VENV`` or ``<cache>/triton-venv``."""
    from trtllm_spec.core.targets import cache_dir

    return Path(os.environ.get("TRTLLM_SPEC_TRITON_VENV") or cache_dir() / "triton-venv").expanduser()


@dataclass(frozen=True)
class TritonInstall:
    venv: Path
    python_version: str  # "3.11": the stub that matches the venv's interpreter
    dist: Path  # pytriton/tritonserver (bin/, backends/, caches/, python_backend_stubs/)
    libs: Path  # nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.dist / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        return self.dist / "python_backend_stubs" / self.python_version / "triton_python_backend_stub"


def find_triton(venv: Path | None = None) -> TritonInstall:
    """The installed wheel, or DependencyMissing naming what is absent and how to install it."""
    venv = Path(venv) if venv else triton_venv()
    sites = sorted(venv.glob("lib/python3.*/site-packages"))
    if not (venv / "bin" / "python").exists() or not sites:
        raise DependencyMissing(f"no Triton venv at {venv}: {SETUP_HINT} or set TRTLLM_SPEC_TRITON_VENV")
    site = sites[-1]
    install = TritonInstall(venv, site.parent.name.removeprefix("python"), site / "pytriton" / "tritonserver",
                            site / "nvidia_pytriton.libs")
    for need in (install.binary, install.stub, install.dist / "backends" / "python" / "libtriton_python.so"):
        if not need.exists():
            raise DependencyMissing(f"{venv} lacks {need.relative_to(venv)}: {SETUP_HINT} ({WHEEL})")
    return install


def python_models(repo: Path) -> list[str]:
    """Models of the repository run by the python backend (their ``1/model.py`` must exist)."""
    out = []
    for cfg in sorted(Path(repo).glob("*/config.pbtxt")):
        if any(line.replace(" ", "") in ('backend:"python"',) for line in cfg.read_text().splitlines()):
            out.append(cfg.parent.name)
    return out


def missing_model_py(repo: Path) -> list[str]:
    """Python models without ``1/model.py``: Triton 2.51 leaves such a model in LOADING forever (the stub is never
    initialised), so the server must be refused before it starts."""
    return [m for m in python_models(repo) if not (Path(repo) / m / "1" / "model.py").is_file()]


def _json(url: str, data: bytes | None = None, timeout: float = 2.0):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=timeout) as r:
            body = r.read()
            return r.status, (json.loads(body) if body else None)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return None, None


class TritonServer(ServerProcess):
    """``tritonserver`` over ``repo`` on 127.0.0.1 (a context manager): ``url`` is HTTP, ``grpc_url`` gRPC."""

    title = "Triton Inference Server"
    ready_path = "/v2/health/ready"
    poll_s = 0.2

    def __init__(self, repo: Path, *, install: TritonInstall | None = None, host: str = "127.0.0.1",
                 http_port: int | None = None, grpc_port: int | None = None, log_file: Path | None = None,
                 env: dict[str, str] | None = None, log_verbose: int = 0):
        from trtllm_spec.serve.llamacpp import free_port

        self.repo = Path(repo).resolve()
        self.install = install or find_triton()
        self.http_port, self.grpc_port = http_port or free_port(host), grpc_port or free_port(host)
        self.grpc_url = f"{host}:{self.grpc_port}"
        self.shm_prefix = f"trtllm_spec_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.workspace: Path | None = None
        self.extra_env = dict(env or {})
        self.started_s: float | None = None
        cmd = [str(self.install.binary), "--model-repository", str(self.repo), "--http-address", host,
               "--http-port", str(self.http_port), "--grpc-address", host, "--grpc-port", str(self.grpc_port),
               "--allow-metrics", "false", "--disable-auto-complete-config", "--exit-timeout-secs", "10",
               "--log-verbose", str(log_verbose),
               "--backend-config", f"python,shm-region-prefix-name={self.shm_prefix}"]
        super().__init__(cmd, f"http://{host}:{self.http_port}", log_file)

    # -- start --------------------------------------------------------------------------------------------
    def _prepare(self) -> None:
        """The workspace: backends/python with the venv's stub beside libtriton_python.so (PyTriton's layout)."""
        self.workspace = Path(tempfile.mkdtemp(prefix="trtllm-spec-triton-"))
        backends = self.workspace / "backends"
        shutil.copytree(self.install.dist / "backends", backends)
        shutil.copy2(self.install.stub, backends / "python" / "triton_python_backend_stub")
        self.cmd += ["--backend-directory", str(backends), "--cache-directory", str(self.install.dist / "caches")]

    def popen_kwargs(self) -> dict:
        env = {**os.environ, **self.extra_env}
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [env.get("LD_LIBRARY_PATH"), str(self.install.libs)]))
        env["PATH"] = f"{self.install.venv / 'bin'}:{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)  # the stub imports the Triton venv's packages, not ours
        return {"env": env, "start_new_session": True}  # its own session: stop() ends every process in it

    def model_states(self) -> dict[str, tuple[str, str]]:
        """{model: (state, reason)} from Triton's repository index."""
        _, index = _json(f"{self.url}/v2/repository/index", data=b"{}")
        return {m.get("name", "?"): (m.get("state", ""), m.get("reason", "")) for m in index or []}

    def ready(self) -> bool:
        status, _ = _json(self.url + self.ready_path)
        if status == 200:
            return True
        if status is not None:  # the server answers: a model that failed to load will never become ready
            failed = {m: r for m, (s, r) in self.model_states().items() if s == "UNAVAILABLE" and r}
            if failed:
                name, reason = next(iter(failed.items()))
                raise UserError(f"Triton could not load model {name!r} of {self.repo}: {reason}")
        return False

    def start(self, timeout_s: float = 120.0) -> TritonServer:
        missing = missing_model_py(self.repo)
        if missing:
            raise UserError(f"{self.repo}: {', '.join(f'{m}/1/model.py' for m in missing)} missing: Triton would "
                            "stay in LOADING forever; write the repository with 'trtllm-spec triton --preview' or "
                            "copy NVIDIA's model.py (launch_triton.sh does, in the GPU container)")
        t0 = time.monotonic()
        self._prepare()
        try:
            super().start(timeout_s)
        except UserError as exc:
            why = self._diagnosis()
            if "exited with code" in str(exc) and why:  # the command line adds nothing to the reason
                raise UserError(f"{self.title} exited before it was ready{why} (log: {self.log_file})") from None
            raise UserError(f"{exc}{why}") from None
        self.started_s = time.monotonic() - t0
        return self

    def _diagnosis(self) -> str:
        """What Triton's log says went wrong: the model that failed to load and why, else its last error lines."""
        if not self.log_file or not Path(self.log_file).is_file():
            return ""
        text = Path(self.log_file).read_text(errors="replace")
        failed = re.search(r"failed to load '([^']+)' version \d+: (.*?)(?:\\n|\"$)", text, re.M)
        if failed:
            return f"; Triton could not load model {failed.group(1)!r}: {failed.group(2)}"
        lines = [ln for ln in text.splitlines() if ln.startswith("E") or "error" in ln.lower()]
        return ("; Triton's log says: " + " | ".join(lines[-3:])) if lines else ""

    # -- stop ---------------------------------------------------------------------------------------------
    def stop(self) -> None:
        pgid = self.proc.pid if self.proc is not None else None
        super().stop()  # SIGTERM: Triton unloads the models (their finalize ends what they started), then SIGKILL
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # stubs or model processes left over
                os.killpg(pgid, signal.SIGKILL)
        for leftover in SHM.glob(self.shm_prefix + "*") if SHM.is_dir() else ():
            leftover.unlink(missing_ok=True)
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None

    def leftovers(self) -> list[Path]:
        """Shared-memory files of this server still in /dev/shm (none after ``stop``)."""
        return sorted(SHM.glob(self.shm_prefix + "*")) if SHM.is_dir() else []

