"""Triton model repositories: both layouts parse with tritonclient's real ModelConfig protobuf, match golden
config.pbtxt files, leave no ``${...}``, and the checker finds broken repositories.

Regenerate the golden files after an intended change: ``UPDATE_GOLDEN=1 pytest tests/unit/test_triton.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from trtllm_spec.deploy.triton import check_name, check_triton_repo, write_triton_repo
from trtllm_spec.deploy.triton_tensors import PARAMETER_KEYS
from trtllm_spec.deploy.trtllm_options import make_llm_api_options
from trtllm_spec.drafters.draft_model.config import DraftModelDrafter
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.errors import UserError

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
text_format = pytest.importorskip("google.protobuf.text_format")

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "triton"
COMMON = dict(tp=1, pp=1, ep=1, max_seq_len=4096, free_gpu_memory_fraction=0.85, enable_block_reuse=True,
              kv_cache_dtype="auto", cuda_graphs=True)


def eagle_options(tp: int = 1) -> dict:
    return make_llm_api_options(**{**COMMON, "tp": tp}, profile="1.2", drafter_type="eagle3",
                                drafter_config=Eagle3Drafter(), speculative_model="drafter", max_draft_len=4,
                                draft_len_schedule=None, max_batch_size=64, batch_sizes=[1, 8, 32, 64])  # 1.2: no schedule


def draft_target_options() -> dict:
    return make_llm_api_options(**COMMON, profile="1.2", drafter_type="draft_model",
                                drafter_config=DraftModelDrafter(model="draft"), speculative_model="draft",
                                max_draft_len=4, draft_len_schedule=None, max_batch_size=8, batch_sizes=[1, 8])


def write_llmapi(out: Path, **kw) -> list[Path]:
    return write_triton_repo(out, options=eagle_options(), backend="pytorch", max_batch_size=64, model="target",
                             profile="1.2", **kw)


def write_engines(out: Path, **kw) -> list[Path]:
    return write_triton_repo(out, options=draft_target_options(), backend="tensorrt", max_batch_size=8,
                             engine_dir="engines/target", draft_engine_dir="engines/draft", tokenizer_dir="target",
                             **kw)


def parse(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def compare_golden(repo: Path, layout: str) -> None:
    files = sorted(p for p in repo.rglob("*") if p.name in ("config.pbtxt", "model.yaml"))
    assert files
    for path in files:
        rel = path.relative_to(repo)
        golden = GOLDEN / layout / rel
        if os.environ.get("UPDATE_GOLDEN") == "1":
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(path.read_text())
        assert golden.exists(), f"missing golden {golden}; run with UPDATE_GOLDEN=1"
        assert path.read_text() == golden.read_text(), f"{rel} differs from {golden}; UPDATE_GOLDEN=1 if intended"
    expected = sorted(p.relative_to(GOLDEN / layout) for p in (GOLDEN / layout).rglob("*") if p.is_file())
    assert expected == [p.relative_to(repo) for p in files], "golden files without a generated counterpart"


def test_llmapi_layout(tmp_path):
    repo = tmp_path / "triton"
    files = write_llmapi(repo)
    assert {p.relative_to(repo).as_posix() for p in files} == {
        "tensorrt_llm/config.pbtxt", "tensorrt_llm/1/model.yaml", "launch_triton.sh", "README.md"}
    compare_golden(repo, "llmapi")
    mc = parse(repo / "tensorrt_llm" / "config.pbtxt")
    assert (mc.name, mc.backend, mc.max_batch_size) == ("tensorrt_llm", "python", 0)
    # streaming: the launcher disables auto-complete, so the policy must be in config.pbtxt itself (issue 22)
    assert mc.HasField("model_transaction_policy") and mc.model_transaction_policy.decoupled is True
    assert mc.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    outputs = {t.name for t in mc.output}
    assert {"text_output", "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"} <= outputs
    doc = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert doc["model"] == "target" and doc["backend"] == "pytorch"
    assert doc["triton_config"] == {"max_batch_size": 0, "decoupled": True}
    assert doc["speculative_config"]["decoding_type"] == "Eagle"  # the 1.2 form (docs/trtllm_compat.md)
    assert check_triton_repo(repo, profile="1.2") == []
    assert not (repo / "tensorrt_llm" / "1" / "model.py").exists()  # NVIDIA's model.py is not shipped
    assert "/app/all_models/llmapi/tensorrt_llm/1/" in (repo / "README.md").read_text()


def test_engine_layout_with_draft_target(tmp_path):
    repo = tmp_path / "triton"
    write_engines(repo)
    compare_golden(repo, "engines")
    assert check_triton_repo(repo) == []
    configs = {p.parent.name: parse(p) for p in repo.glob("*/config.pbtxt")}
    assert set(configs) == {"ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_draft",
                            "tensorrt_llm_bls"}
    target, draft, bls = configs["tensorrt_llm"], configs["tensorrt_llm_draft"], configs["tensorrt_llm_bls"]
    assert target.backend == "tensorrtllm" and target.max_batch_size == 8 and target.model_transaction_policy.decoupled
    params = {k: v.string_value for k, v in target.parameters.items()}
    assert params["gpt_model_path"] == "engines/target"
    assert params["kv_cache_free_gpu_mem_fraction"] == "0.85" and params["enable_kv_cache_reuse"] == "true"
    assert draft.parameters["gpt_model_path"].string_value == "engines/draft"
    assert bls.parameters["tensorrt_llm_draft_model_name"].string_value == "tensorrt_llm_draft"
    assert "num_draft_tokens" in {t.name for t in bls.input}
    steps = [s.model_name for s in configs["ensemble"].ensemble_scheduling.step]
    assert steps == ["preprocessing", "tensorrt_llm", "postprocessing"]
    for name, mc in configs.items():
        kind = "tensorrt_llm" if name.startswith("tensorrt_llm") and name != "tensorrt_llm_bls" else name
        assert set(mc.parameters) <= PARAMETER_KEYS[kind]
        assert (repo / name / "1").is_dir()


def test_no_template_variables_and_no_build_paths(tmp_path):
    for writer, repo in ((write_llmapi, tmp_path / "a"), (write_engines, tmp_path / "b")):
        writer(repo)
        for path in repo.rglob("*"):
            if path.is_file():
                text = path.read_text()
                assert "${" not in text or path.name == "launch_triton.sh", path
                assert str(tmp_path) not in text, path
        launch = repo / "launch_triton.sh"
        assert os.access(launch, os.X_OK)
        assert subprocess.run(["bash", "-n", str(launch)]).returncode == 0


def test_eagle_decoding_mode_and_gpu_ids(tmp_path):
    repo = tmp_path / "r"
    write_triton_repo(repo, options=eagle_options(tp=2), backend="tensorrt", max_batch_size=16,
                      engine_dir="engines/target", tokenizer_dir="target", decoding_mode="eagle",
                      eagle_choices=[[0], [1], [0, 0]], gpu_device_ids=[[0, 1], [2, 3]])
    params = {k: v.string_value for k, v in parse(repo / "tensorrt_llm" / "config.pbtxt").parameters.items()}
    assert params["decoding_mode"] == "eagle"
    assert params["eagle_choices"] == "{0}, {1}, {0, 0}"
    assert params["gpu_device_ids"] == "0,1;2,3"
    assert "--world_size=2" in (repo / "launch_triton.sh").read_text()
    assert not (repo / "tensorrt_llm_bls").exists()
    assert check_triton_repo(repo) == []


def test_llmapi_multi_instance(tmp_path):
    repo = tmp_path / "r"
    write_triton_repo(repo, options=eagle_options(tp=2), backend="pytorch", max_batch_size=64, model="target",
                      gpu_device_ids="0,1;2,3")
    mc = parse(repo / "tensorrt_llm" / "config.pbtxt")
    assert mc.instance_group[0].count == 2 and mc.parameters["gpu_device_ids"].string_value == "0,1;2,3"
    assert "--no-mpi" in (repo / "launch_triton.sh").read_text()
    with pytest.raises(UserError, match="each instance needs .* = 2 GPU"):
        write_triton_repo(tmp_path / "s", options=eagle_options(tp=2), backend="pytorch", max_batch_size=64,
                          model="target", gpu_device_ids="0;1")
    with pytest.raises(UserError, match="gpu_device_ids"):
        write_triton_repo(tmp_path / "t", options=eagle_options(), backend="pytorch", max_batch_size=64,
                          model="target", gpu_device_ids="0,a")


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", "", ".", "..", "a b", "naïve", "x;rm"])
def test_bad_model_names_rejected(tmp_path, name):
    with pytest.raises(UserError, match="not a valid name"):
        check_name(name, "model name")
    with pytest.raises(UserError, match="not a valid name"):
        write_llmapi(tmp_path / "r", model_name=name)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_bad_inputs_rejected(tmp_path):
    with pytest.raises(UserError, match="engine_dir"):
        write_triton_repo(tmp_path / "a", options={}, backend="tensorrt", max_batch_size=8, tokenizer_dir="t")
    with pytest.raises(UserError, match="relative to the bundle root"):
        write_triton_repo(tmp_path / "b", options={}, backend="tensorrt", max_batch_size=8,
                          engine_dir="/abs/engine", tokenizer_dir="t")
    with pytest.raises(UserError, match="needs the model to serve"):
        write_triton_repo(tmp_path / "c", options=eagle_options(), backend="pytorch", max_batch_size=8)
    with pytest.raises(UserError, match="decoding_mode 'eagle3'"):
        write_triton_repo(tmp_path / "d", options={}, backend="tensorrt", max_batch_size=8, engine_dir="e",
                          tokenizer_dir="t", decoding_mode="eagle3")
    with pytest.raises(UserError, match="backend 'vllm'"):
        write_triton_repo(tmp_path / "e", options={}, backend="vllm", max_batch_size=8)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="unknown key 'speculative_config.foo'"):
        options = eagle_options()
        options["speculative_config"]["foo"] = 1
        write_triton_repo(tmp_path / "f", options=options, backend="pytorch", max_batch_size=8, model="m",
                          profile="1.2")


def test_checker_finds_problems(tmp_path):
    repo = tmp_path / "r"
    write_engines(repo)
    pre = repo / "preprocessing" / "config.pbtxt"
    pre.write_text(pre.read_text().replace('"true"', '"${add_special_tokens}"'))
    trt = repo / "tensorrt_llm" / "config.pbtxt"
    trt.write_text(trt.read_text() + 'parameters {\n  key: "gpt_model_pth"\n  value { string_value: "x" }\n}\n')
    post = repo / "postprocessing" / "config.pbtxt"
    post.write_text(post.read_text().replace("max_batch_size: 8", "max_batch_size: ${triton_max_batch_size}"))
    shutil.rmtree(repo / "tensorrt_llm_draft")
    problems = "\n".join(check_triton_repo(repo))
    assert "preprocessing/config.pbtxt: unfilled template variables ['${add_special_tokens}']" in problems
    assert "parameter keys ['gpt_model_pth'] are not read by the tensorrt_llm model" in problems
    assert "postprocessing/config.pbtxt: not a valid Triton ModelConfig" in problems
    assert "refers to model 'tensorrt_llm_draft', which is not in the repository" in problems


def test_checker_model_yaml_and_names(tmp_path):
    repo = tmp_path / "r"
    write_llmapi(repo)
    (repo / "tensorrt_llm").rename(repo / "llm")
    (repo / "llm" / "1" / "model.yaml").write_text("model: target\n")
    problems = "\n".join(check_triton_repo(repo))
    assert "name 'tensorrt_llm' must equal the folder name 'llm'" in problems
    assert "needs 'model' and a 'triton_config' mapping" in problems
    assert check_triton_repo(tmp_path / "empty") == [f"{tmp_path / 'empty'}: no <model>/config.pbtxt found"]


@pytest.mark.parametrize("layout", ["llmapi", "engines"])
def test_launch_script_copies_model_py_and_runs_from_bundle_root(tmp_path, layout):
    # Fakes: NVIDIA's container layout and a Triton HTTP endpoint (tests/unit/test_triton_launch.py)
    from tests.unit.test_triton_launch import fake_container, fake_triton_http

    bundle = tmp_path / "bundle"
    repo = bundle / "triton"
    (write_llmapi if layout == "llmapi" else write_engines)(repo)
    env = fake_container(tmp_path, layout)
    with fake_triton_http(True, []) as port:
        r = subprocess.run(["bash", str(repo / "launch_triton.sh")], cwd=tmp_path, capture_output=True, text=True,
                           env={**env, "TRTLLM_TRITON_HTTP_PORT": str(port)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"Triton ready on port {port}" in r.stderr
    cwd, *args = (tmp_path / "launch.log").read_text().split()
    assert Path(cwd) == bundle and args[0] == f"--model_repo={repo}" and args[1] == f"--http_port={port}"
    if layout == "llmapi":
        assert (repo / "tensorrt_llm" / "1" / "model.py").exists()
        assert yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())["model"] == "target"
    else:
        assert "--multi-model" in args and "--world_size=1" in args
        assert all((repo / m / "1" / "model.py").exists()
                   for m in ("preprocessing", "postprocessing", "tensorrt_llm_bls"))


@pytest.mark.parametrize("decoupled", [True, False])
def test_llmapi_transaction_policy_in_config_pbtxt(tmp_path, decoupled):
    """Triton's launcher (launch_triton_server.py) passes --disable-auto-complete-config, so model.py's
    auto_complete_config never copies triton_config.decoupled into the model config: config.pbtxt must hold it,
    and the checker refuses a repository where the two disagree."""
    repo = tmp_path / "r"
    write_llmapi(repo, decoupled=decoupled)
    mc = parse(repo / "tensorrt_llm" / "config.pbtxt")
    assert mc.HasField("model_transaction_policy")
    assert mc.model_transaction_policy.decoupled is decoupled
    doc = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert doc["triton_config"]["decoupled"] is decoupled
    assert check_triton_repo(repo, profile="1.2") == []
    cfg = repo / "tensorrt_llm" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace(f"decoupled: {str(decoupled).lower()}",
                                           f"decoupled: {str(not decoupled).lower()}"))
    problems = check_triton_repo(repo, profile="1.2")
    assert len(problems) == 1 and "model_transaction_policy.decoupled" in problems[0]


def test_llmapi_inputs_against_upstream():
    """Our llmapi inputs are upstream's @c8c6df08 set; the optional inputs upstream added later
    (@0a71057313ec0626527e164a8fc0205c5822e2f5: image_url, lora_*) are left out with a reason each, and
    docs/trtllm_compat.md names every one."""
    from trtllm_spec.deploy.triton_tensors import LLMAPI_INPUTS, LLMAPI_LEFT_OUT

    ours = [row.split()[0] for row in LLMAPI_INPUTS.strip().splitlines()]
    c8c6df08 = ["text_input", "streaming", "sampling_param_best_of", "sampling_param_temperature",
                "sampling_param_top_k", "sampling_param_top_p", "sampling_param_frequency_penalty",
                "sampling_param_presence_penalty", "sampling_param_max_tokens", "sampling_param_stop",
                "sampling_param_seed", "sampling_param_exclude_input_from_output",
                "sampling_param_return_perf_metrics", "return_finish_reason", "return_stop_reason",
                "return_cumulative_logprob", "stop"]
    assert ours == c8c6df08
    assert set(LLMAPI_LEFT_OUT) == {"image_url", "lora_id", "lora_name", "lora_path", "lora_ckpt_source"}
    assert not set(LLMAPI_LEFT_OUT) & set(ours)
    compat = (GOLDEN.parents[1].parent / "docs" / "trtllm_compat.md").read_text()
    section = compat[compat.index("### Triton llmapi inputs"):]
    assert all(f"`{name}`" in section for name in LLMAPI_LEFT_OUT)
    assert "0a71057313ec0626527e164a8fc0205c5822e2f5" in section and "c8c6df08bd0ead54cd47f7973e1e425c28a174cd" in section
