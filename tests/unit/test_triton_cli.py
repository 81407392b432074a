"""``trtllm-spec triton --preview`` and ``assets serve-triton``: flags refused with one clear line (exit 2), before
anything is written or started."""

from __future__ import annotations

import pytest

from trtllm_spec.deploy.triton import write_triton_repo
from trtllm_spec.errors import UserError

pytest.importorskip("tritonclient.grpc.model_config_pb2")


def test_triton_threads_needs_preview(cli, tmp_path):
    r = cli("triton", tmp_path / "nope", "--out", tmp_path / "repo", "--threads", "2")
    assert r.exit_code == 2 and "--threads 2" in r.output and "add --preview" in r.output
    assert not (tmp_path / "repo").exists()


def test_triton_preview_choice(cli, tmp_path):
    r = cli("triton", tmp_path / "nope", "--out", tmp_path / "repo", "--preview", "vllm")
    assert r.exit_code == 2 and "Invalid value for '--preview': 'vllm'" in r.output


def test_preview_refuses_the_engine_layout(tmp_path):
    from trtllm_spec.deploy.triton_preview import add_preview

    repo = tmp_path / "r"
    write_triton_repo(repo, options={}, backend="tensorrt", max_batch_size=8, engine_dir="engines/target",
                      tokenizer_dir="target")
    with pytest.raises(UserError, match="--preview serves the llmapi layout"):
        add_preview(repo, mode="reference", model_name="tensorrt_llm", bundle=tmp_path)
    with pytest.raises(UserError, match="--preview 'llamacpp' is not available"):
        add_preview(repo, mode="llamacpp", model_name="tensorrt_llm", bundle=tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--http-port", "0"], "--http-port 0: give a TCP port in 1..65535"),
    (["--grpc-port", "70000"], "--grpc-port 70000: give a TCP port in 1..65535"),
    (["--timeout", "0"], "--timeout 0.0: give a positive number of seconds"),
    (["--repo", "r", "--threads", "2"], "--threads 2: >= 0, and only without --repo"),
])
def test_serve_triton_bad_flags(cli, tmp_path, args, message):
    r = cli("assets", "serve-triton", tmp_path, *args)
    assert r.exit_code == 2 and message in r.output, r.output


def test_serve_triton_without_the_triton_venv(cli, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("TRTLLM_SPEC_TRITON_VENV", str(tmp_path / "none"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    r = cli("assets", "serve-triton", tmp_path)
    assert r.exit_code == 2 and "no Triton venv at" in r.output and "scripts/setup.sh --dev" in r.output
    assert "Traceback" not in r.output
    assert not list((tmp_path / "tmp").iterdir())  # the refused start left no temporary log folder


def test_serve_triton_refuses_a_repository_that_fails_its_check(cli, tmp_path):
    from trtllm_spec.errors import DependencyMissing
    from trtllm_spec.serve.triton import find_triton

    try:
        find_triton()
    except DependencyMissing as exc:
        pytest.skip(f"no Triton venv here ({exc}); scripts/setup.sh --dev installs it")
    (tmp_path / "repo").mkdir()
    r = cli("assets", "serve-triton", tmp_path, "--repo", tmp_path / "repo")
    assert r.exit_code == 2 and "no <model>/config.pbtxt found" in r.output
