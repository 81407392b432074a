"""The GPU launcher (``launch_triton.sh``) fails fast and waits for readiness with a deadline.

Fakes (no GPU, no NVIDIA container here): the container's layout (``/app/all_models``, ``/app/scripts/
launch_triton_server.py``) rebuilt from the paths the notes give, an importable stand-in ``tensorrt_llm`` package
(named fake), and a stand-in Triton HTTP endpoint answering the health and repository-index routes of Triton's
HTTP/REST protocol (``/v2/health/ready``, ``/v2/repository/index``).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trtllm_spec.deploy.triton import write_triton_repo

pytest.importorskip("tritonclient.grpc.model_config_pb2")

LAUNCH_DEADLINE_S = 60  # every launcher run here ends well within it


def fake_container(tmp_path: Path, layout: str, *, model_py: bool = True, tensorrt_llm: bool = True) -> dict:
    """The environment that points launch_triton.sh at a fake container; the fake launch_triton_server.py records
    its folder and arguments in ``<tmp>/launch.log``."""
    models, scripts = tmp_path / "app" / "all_models", tmp_path / "app" / "scripts"
    for src in (["llmapi/tensorrt_llm"] if layout == "llmapi" else
                ["inflight_batcher_llm/preprocessing", "inflight_batcher_llm/postprocessing",
                 "inflight_batcher_llm/tensorrt_llm_bls"]):
        (models / src / "1").mkdir(parents=True)
        if model_py:
            (models / src / "1" / "model.py").write_text("# upstream model.py\n")
        (models / src / "1" / "model.yaml").write_text("model: TinyLlama/TinyLlama-1.1B-Chat-v1.0\n")
    scripts.mkdir(parents=True)
    log = tmp_path / "launch.log"
    (scripts / "launch_triton_server.py").write_text(
        f"import os, sys\nopen({str(log)!r}, 'w').write(os.getcwd() + ' ' + ' '.join(sys.argv[1:]))\n")
    site = tmp_path / "site"
    if tensorrt_llm:
        (site / "tensorrt_llm").mkdir(parents=True)
        (site / "tensorrt_llm" / "__init__.py").write_text("# fake: stands in for NVIDIA's package\n")
    return {**os.environ, "TRTLLM_TRITON_MODELS": str(models), "TRTLLM_TRITON_SCRIPTS": str(scripts),
            "PYTHONPATH": str(site), "TRTLLM_TRITON_FOREGROUND": "0"}


@contextmanager
def fake_triton_http(ready: bool, index: list[dict]):
    """A stand-in for Triton's HTTP endpoint on a free 127.0.0.1 port; yields the port."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes = b"") -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            self._send(200 if (self.path == "/v2/health/live" or ready) else 400)

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(200, json.dumps(index).encode()) if self.path == "/v2/repository/index" else self._send(404)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def write_llmapi(repo: Path) -> None:
    write_triton_repo(repo, options={"max_batch_size": 8}, backend="pytorch", max_batch_size=8, model="target")


def launch(repo: Path, env: dict, **extra) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(repo / "launch_triton.sh")], cwd=repo.parent, env={**env, **extra},
                       capture_output=True, text=True, timeout=LAUNCH_DEADLINE_S)
    return r, time.monotonic() - t0


def test_launcher_refuses_a_missing_model_py_at_once(tmp_path):
    repo = tmp_path / "bundle" / "triton"
    write_llmapi(repo)
    r, took = launch(repo, fake_container(tmp_path, "llmapi", model_py=False))
    assert r.returncode == 1 and took < 10
    assert "tensorrt_llm/1/model.py is missing" in r.stderr and "lacks NVIDIA's model.py" in r.stderr
    assert not (tmp_path / "launch.log").exists()  # Triton never started


def test_launcher_refuses_without_tensorrt_llm(tmp_path):
    repo = tmp_path / "bundle" / "triton"
    write_llmapi(repo)
    r, _ = launch(repo, fake_container(tmp_path, "llmapi", tensorrt_llm=False))
    assert r.returncode == 1 and "cannot import tensorrt_llm" in r.stderr
    assert not (tmp_path / "launch.log").exists()


def test_launcher_deadline_names_what_is_still_loading(tmp_path):
    repo = tmp_path / "bundle" / "triton"
    write_llmapi(repo)
    env = fake_container(tmp_path, "llmapi")
    with fake_triton_http(False, [{"name": "tensorrt_llm", "version": "1", "state": "LOADING"}]) as port:
        r, took = launch(repo, env, TRTLLM_TRITON_HTTP_PORT=str(port), TRTLLM_TRITON_READY_TIMEOUT="3")
    assert r.returncode == 1 and took < 20
    assert f"not ready on port {port} within 3 s; models not ready: tensorrt_llm (LOADING)" in r.stderr


def test_launcher_reports_a_model_that_failed_to_load(tmp_path):
    repo = tmp_path / "bundle" / "triton"
    write_llmapi(repo)
    env = fake_container(tmp_path, "llmapi")
    index = [{"name": "tensorrt_llm", "version": "1", "state": "UNAVAILABLE", "reason": "CUDA out of memory"}]
    with fake_triton_http(False, index) as port:
        r, _ = launch(repo, env, TRTLLM_TRITON_HTTP_PORT=str(port), TRTLLM_TRITON_READY_TIMEOUT="30")
    assert r.returncode == 1 and "could not load tensorrt_llm: CUDA out of memory" in r.stderr


def test_launcher_without_a_server_fails_at_its_deadline(tmp_path):
    from trtllm_spec.serve.llamacpp import free_port

    repo = tmp_path / "bundle" / "triton"
    write_llmapi(repo)
    r, took = launch(repo, fake_container(tmp_path, "llmapi"), TRTLLM_TRITON_HTTP_PORT=str(free_port()),
                     TRTLLM_TRITON_READY_TIMEOUT="2")
    assert r.returncode == 1 and took < 20 and "the server never answered" in r.stderr
