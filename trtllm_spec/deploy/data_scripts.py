"""The bundle's data scripts for GPU nodes (issue 15): regenerate the drafter's training data through the serving
engine. ``data.sh`` serves the target with TensorRT-LLM *without* speculation (the bundle's own LLM API options
minus ``speculative_config``, ``llm_api_options.data.yaml``) and runs ``trtllm-spec data regenerate
--server-url``; ``data.sbatch`` is the SLURM array variant (task i of N regenerates ``--shard i/N``, each into its
own JSONL). The replies are text, so training from them is online (``offline_features=false``)."""

from __future__ import annotations

import shlex

from trtllm_spec.deploy.scripts import _header, _positive, _relative, _sbatch_header

DATA_OPTIONS_FILE = "llm_api_options.data.yaml"
RECIPE_FILE = "recipe.resolved.yaml"
_RUN = ('trtllm-serve {model} --extra_llm_api_options {opts} --host 127.0.0.1 --port "$PORT" &\n'
        'SERVER=$!\ntrap \'kill "$SERVER" 2>/dev/null || true\' EXIT\n'
        'for _ in $(seq 1 900); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 2; done\n'
        'trtllm-spec data regenerate {recipe} --server-url "http://127.0.0.1:$PORT" \\\n'
        '    --set drafter.training.data.offline_features=false {shard}"$@"\n')


def data_options(options: dict) -> dict:
    """The bundle's LLM API options without speculation (regeneration must be the target's own decoding)."""
    return {k: v for k, v in options.items() if k != "speculative_config"}


def data_sh(*, model: str, port: int = 8001) -> str:
    model = _relative(model, "model")
    return _header("Regenerate the drafter's training data with the target served by TensorRT-LLM (no "
                   "speculation).") + 'cd "$(dirname "$0")"\n' + f'PORT="${{PORT:-{_positive(port, "port")}}}"\n' + \
        _RUN.format(model=shlex.quote(model), opts=DATA_OPTIONS_FILE, recipe=RECIPE_FILE, shard="")


def data_sbatch(*, job_name: str, shards: int, gpus_per_node: int, model: str, image: str | None = None,
                time_limit: str = "24:00:00", port: int = 8001) -> str:
    """SLURM array of ``shards`` one-node tasks; task i serves the target and regenerates ``--shard i/N``."""
    model = _relative(model, "model")
    body = _sbatch_header(job_name, 1, 1, gpus_per_node, time_limit, None, None, image)
    array = f"#SBATCH --exclusive\n#SBATCH --array=0-{_positive(shards, 'shards') - 1}"
    body = body.replace("#SBATCH --exclusive", array)
    return body + f'PORT="${{PORT:-{_positive(port, "port")}}}"\n' + \
        'export PORT N="${SLURM_ARRAY_TASK_COUNT:-' + str(shards) + '}"\n' + \
        'srun ${CONTAINER_ARGS[@]+"${CONTAINER_ARGS[@]}"} bash -c \'' + \
        _RUN.format(model=shlex.quote(model), opts=DATA_OPTIONS_FILE, recipe=RECIPE_FILE,
                    shard='--shard "$SLURM_ARRAY_TASK_ID/$N" ').replace('"$@"', "").replace("'", "'\\''") + "'\n"


def write_data_scripts(ctx, model: str, write_text_atomic, render_yaml) -> list[str]:
    """Write the three data files into the bundle; returns their names (called by the bundle's engine stage)."""
    b, r = ctx.bundle, ctx.recipe
    write_text_atomic(b / DATA_OPTIONS_FILE, render_yaml(data_options(ctx.options), profile=r.trtllm_profile))
    write_text_atomic(b / "data.sh", data_sh(model=model))
    write_text_atomic(b / "data.sbatch", data_sbatch(job_name=f"{r.name}-data", shards=8,
                                                     gpus_per_node=r.hardware.tp * r.hardware.pp, model=model))
    (b / "data.sh").chmod(0o755)
    return [DATA_OPTIONS_FILE, "data.sh", "data.sbatch"]
