"""Generated shell scripts: valid bash, run from their own folder, no absolute paths of the build machine,
the SLURM fields we rely on, and the legacy engine commands."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trtllm_spec.deploy import scripts
from trtllm_spec.errors import UserError

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not found")

# absolute paths a script may name: container-internal mount points and the release image's examples
ALLOWED_ABSOLUTE = {"/bundle", "/hf", "/app/tensorrt_llm/examples"}
TRAIN = ["trtllm-spec", "train", "recipe.yaml", "--out", "drafter"]


def legacy() -> list[str]:
    return scripts.legacy_engine_commands(target_model="target", draft_model="draft", max_draft_len=4,
                                          max_batch_size=8, max_input_len=1024, max_seq_len=2048, tp=2)


def all_scripts() -> dict[str, str]:
    return {
        "serve.sh": scripts.serve_sh(model="meta-llama/Llama-3.1-8B-Instruct"),
        "bench.sh": scripts.bench_sh(model="meta-llama/Llama-3.1-8B-Instruct", model_path="target",
                                     concurrency=[1, 8, 64], num_requests=200),
        "replan.sh": scripts.replan_sh(report="bench_results/report_c8.json"),
        "serve_srun.sh": scripts.multinode_serve_sh(model="target", world_size=16, gpus_per_node=8),
        "serve_mpirun.sh": scripts.multinode_serve_sh(model="target", world_size=16, gpus_per_node=8,
                                                      launcher="mpirun"),
        "slurm_serve.sbatch": scripts.slurm_serve_sbatch(job_name="serve-llama", nodes=2, gpus_per_node=8,
                                                         model="target", partition="gpu", account="proj-1"),
        "slurm_train.sbatch": scripts.slurm_train_sbatch(job_name="train-eagle3", nodes=4, gpus_per_node=8,
                                                         train_command=TRAIN, image="trtllm-spec+train.sqsh"),
        "build_engines.sh": scripts.engines_sh(legacy()),
    }


def absolute_paths(text: str) -> set[str]:
    """Absolute paths outside comments, ignoring ones under a shell variable ("$X"/sub)."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    code = re.sub(r'"?\$\{?\w+\}?"?/', "", code)
    return set(re.findall(r'(?:^|[\s"=:(,-])(/[^\s"\',:)}]+)', code))


@pytest.mark.parametrize("name", sorted(all_scripts()))
def test_bash_syntax_and_no_absolute_paths(name):
    text = all_scripts()[name]
    result = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr
    assert absolute_paths(text) <= ALLOWED_ABSOLUTE, absolute_paths(text)
    assert "/work" not in text and "/home/" not in text and "/tmp" not in text
    assert text.startswith("#!/")
    assert "set -euo pipefail" in text


def test_absolute_path_helper_sees_paths():
    assert absolute_paths('x --model /data/llama\n# /in/comment\n"$A"/rel') == {"/data/llama"}


def run_with_fake(tmp_path: Path, script: str, name: str, tool: str, *args: str) -> list[str]:
    """Run a generated script from another folder, with ``tool`` a fake that logs its folder and arguments.

    Fake: TensorRT-LLM's CLIs cannot run here; this stand-in only records how it was called."""
    bundle, bin_dir = tmp_path / "bundle", tmp_path / "bin"
    bundle.mkdir(exist_ok=True), bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    fake = bin_dir / tool
    fake.write_text(f'#!/usr/bin/env bash\necho "$PWD $*" >> {log}\n')
    fake.chmod(0o755)
    (bundle / name).write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(bundle / name), *args], cwd=tmp_path, env=env, check=True)
    return log.read_text().splitlines()


def test_serve_runs_from_its_folder(tmp_path):
    calls = run_with_fake(tmp_path, scripts.serve_sh(model="target", port=8123), "serve.sh", "trtllm-serve",
                          "--log_level", "debug")
    assert calls == [f"{tmp_path / 'bundle'} target --extra_llm_api_options llm_api_options.yaml "
                     "--host 0.0.0.0 --port 8123 --log_level debug"]


def test_bench_loops_over_concurrency(tmp_path):
    text = scripts.bench_sh(model="meta-llama/Llama-3.1-8B-Instruct", model_path="target", concurrency=[1, 16])
    calls = run_with_fake(tmp_path, text, "bench.sh", "trtllm-bench")
    assert len(calls) == 2
    bundle = str(tmp_path / "bundle")
    assert calls[1] == (f"{bundle} --model meta-llama/Llama-3.1-8B-Instruct --model_path target throughput "
                        "--dataset dataset.jsonl --extra_llm_api_options llm_api_options.yaml --concurrency 16 "
                        "--warmup 2 --streaming --report_json bench_results/report_c16.json")
    assert (tmp_path / "bundle" / "bench_results").is_dir()



def test_bench_results_elsewhere_when_the_bundle_is_read_only(tmp_path):
    """A bundle mounted read-only (docs/docker.md): bench.sh stops with a hint, or writes under BENCH_RESULTS.
    The unwritable folder is simulated with a file in its place (a 0555 folder stays writable for root)."""
    text = scripts.bench_sh(model="m", concurrency=[4])
    bundle, bin_dir = tmp_path / "bundle", tmp_path / "bin"
    bundle.mkdir(), bin_dir.mkdir()
    (bundle / "bench.sh").write_text(text)
    (bundle / "bench_results").write_text("")  # mkdir -p bench_results fails, as on a read-only mount
    fake = bin_dir / "trtllm-bench"  # fake: records its arguments, as in run_with_fake
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {tmp_path / "calls.log"}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", str(bundle / "bench.sh")], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "set BENCH_RESULTS to a writable folder" in r.stderr, r.stderr
    assert not (tmp_path / "calls.log").exists()
    results = tmp_path / "results"
    subprocess.run(["bash", str(bundle / "bench.sh")], env={**env, "BENCH_RESULTS": str(results)}, check=True)
    assert (tmp_path / "calls.log").read_text().split()[-1] == f"{results}/report_c4.json"
    assert results.is_dir()
    with pytest.raises(UserError, match="report folder"):
        scripts.bench_sh(model="m", concurrency=[1], report_dir='out"$(x)')

def test_bench_dataset_format():
    lines = scripts.bench_dataset_jsonl(["Hello", "Write a poem"], [32, 64]).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"task_id": 0, "prompt": "Hello", "output_tokens": 32},
        {"task_id": 1, "prompt": "Write a poem", "output_tokens": 64}]
    with pytest.raises(UserError, match="prompt 1 is empty"):
        scripts.bench_dataset_jsonl(["a", " "], 8)
    with pytest.raises(UserError, match="2 prompts but 1 output lengths"):
        scripts.bench_dataset_jsonl(["a", "b"], [8])


def test_slurm_serve_fields():
    text = all_scripts()["slurm_serve.sbatch"]
    for field in ("--job-name=serve-llama", "--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8",
                  "--time=04:00:00", "--partition=gpu", "--account=proj-1", "--exclusive"):
        assert f"#SBATCH {field}\n" in text
    assert 'IMAGE="${IMAGE-nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc27}"' in text  # auto's release
    assert "srun --mpi=pmix" in text and "trtllm-llmapi-launch trtllm-serve target" in text
    assert 'cd "${BUNDLE_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}"' in text


def test_slurm_train_fields():
    text = all_scripts()["slurm_train.sbatch"]
    assert "#SBATCH --nodes=4\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
    assert "#SBATCH --gpus-per-node=8\n" in text and "#SBATCH --time=24:00:00\n" in text
    assert 'torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=8' in text
    assert '--rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"' in text
    assert text.rstrip().endswith("--no-python trtllm-spec train recipe.yaml --out drafter")
    assert 'IMAGE="${IMAGE-trtllm-spec+train.sqsh}"' in text


def test_multinode_layouts():
    assert "srun --nodes=2 --ntasks-per-node=8 --mpi=pmix" in all_scripts()["serve_srun.sh"]
    assert "mpirun -np 16 --hostfile \"$HOSTFILE\" --npernode 8" in all_scripts()["serve_mpirun.sh"]
    single = scripts.multinode_serve_sh(model="target", world_size=4, gpus_per_node=8)
    assert "--nodes=1 --ntasks-per-node=4" in single
    with pytest.raises(UserError, match="not a multiple of gpus_per_node"):
        scripts.multinode_serve_sh(model="target", world_size=12, gpus_per_node=8)


def test_legacy_engine_commands():
    convert_draft, convert_target, build_draft, build_target = legacy()
    assert convert_draft.startswith('python3 "$TRTLLM_EXAMPLES"/models/core/llama/convert_checkpoint.py '
                                    "--model_dir draft --output_dir trt_ckpt/draft")
    assert "--tp_size 2" in convert_target
    assert build_draft.startswith("trtllm-build --checkpoint_dir trt_ckpt/draft --output_dir engines/draft")
    assert "--speculative_decoding_mode" not in build_draft
    assert build_target.endswith("--speculative_decoding_mode draft_tokens_external --max_draft_len 4")
    assert all("--use_paged_context_fmha enable" in c for c in (build_draft, build_target))


@pytest.mark.parametrize("call,match", [
    (lambda: scripts.serve_sh(model="/home/me/llama"), "relative to the bundle root"),
    (lambda: scripts.bench_sh(model="m", concurrency=[1], dataset="~/data.jsonl"), "relative to the bundle root"),
    (lambda: scripts.bench_sh(model="m", concurrency=[]), "at least one concurrency"),
    (lambda: scripts.legacy_engine_commands(target_model="t", draft_model="/abs/d", max_draft_len=4,
                                            max_batch_size=1, max_input_len=8, max_seq_len=16), "relative"),
    (lambda: scripts.legacy_engine_commands(target_model="t", draft_model="d", max_draft_len=0,
                                            max_batch_size=1, max_input_len=8, max_seq_len=16), "max_draft_len"),
    (lambda: scripts.slurm_train_sbatch(job_name="t", nodes=1, gpus_per_node=8, train_command=["python", "x.py"]),
     "must start with 'trtllm-spec train'"),
    (lambda: scripts.slurm_serve_sbatch(job_name="a b", nodes=1, gpus_per_node=8, model="m"), "job name"),
    (lambda: scripts.slurm_serve_sbatch(job_name="a", nodes=1, gpus_per_node=8, model="m", time_limit="4h"),
     "not a SLURM time"),
    (lambda: scripts.slurm_serve_sbatch(job_name="a", nodes=1, gpus_per_node=8, model="m", image='x"; rm'),
     "image"),
    (lambda: scripts.serve_sh(model="m", host="0.0.0.0; rm -rf"), "host"),
])
def test_bad_inputs_rejected(call, match):
    with pytest.raises(UserError, match=match):
        call()


def test_data_scripts_serve_without_speculation_and_shard(tmp_path):
    import subprocess

    from trtllm_spec.deploy.data_scripts import data_options, data_sbatch, data_sh

    assert data_options({"speculative_config": {"decoding_type": "Eagle"}, "max_batch_size": 8}) == \
        {"max_batch_size": 8}
    sh, sb = data_sh(model="target"), data_sbatch(job_name="d", shards=4, gpus_per_node=8, model="target")
    for text in (sh, sb):
        assert "trtllm-serve target --extra_llm_api_options llm_api_options.data.yaml" in text
        assert "trtllm-spec data regenerate recipe.resolved.yaml --server-url" in text
        f = tmp_path / "s.sh"
        f.write_text(text)
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0
    assert "#SBATCH --array=0-3" in sb and '--shard "$SLURM_ARRAY_TASK_ID/$N"' in sb and "--shard" not in sh


def test_savestate_options_and_deferred_launch_script(tmp_path):
    """The bundle's TensorRT-LLM SaveState files (deferred: TensorRT-LLM cannot run here): the options carry the
    documented SaveHiddenStatesDecodingConfig fields, the script is valid bash around valid Python."""
    import ast
    import subprocess

    from trtllm_spec.deploy.data_scripts import savestate_options, savestate_sh

    opts = savestate_options({"speculative_config": {"decoding_type": "Eagle3"}, "max_batch_size": 8}, [9, 1, 5])
    assert opts == {"max_batch_size": 8, "speculative_config": {
        "decoding_type": "SaveState", "output_directory": "features_savestate", "write_interval": 20,
        "file_prefix": "dp_0", "eagle3_layers_to_capture": [1, 5, 9]}}
    sh = savestate_sh(model="target")
    assert "DEFERRED" in sh.splitlines()[1] and "llm_api_options.savestate.yaml" in sh
    f = tmp_path / "s.sh"
    f.write_text(sh)
    assert subprocess.run(["bash", "-n", str(f)]).returncode == 0
    ast.parse(sh.split("<<'PY'\n", 1)[1].rsplit("PY\n", 1)[0])
