"""The bundle's data scripts for GPU nodes (issue 15): regenerate the drafter's training data through the serving
engine. ``data.sh`` serves the target with TensorRT-LLM *without* speculation (the bundle's own LLM API options
minus ``speculative_config``, ``llm_api_options.data.yaml``) and runs ``trtllm-spec data regenerate
--server-url``; ``data.sbatch`` is the SLURM array variant (task i of N regenerates ``--shard i/N``, each into its
own JSONL). The replies are text; offline EAGLE-3 training captures the target's features over them afterwards
(``data features``), or reads the dump of ``features_savestate.sh``: TensorRT-LLM's ``SaveState`` decoding
(``llm_api_options.savestate.yaml``, ``decoding_type: SaveState``) writes the hidden states of every conversation
as ``.pt`` files that ``data/savestate.py`` reads (``--set drafter.training.data.features_path=DIR``). That script
is DEFERRED: it needs TensorRT-LLM on a GPU node and was never run where this package is tested."""

from __future__ import annotations

import shlex

from trtllm_spec.core.bundle import RECIPE_FILE
from trtllm_spec.deploy.scripts import _header, _positive, _relative, _sbatch_header

DATA_OPTIONS_FILE = "llm_api_options.data.yaml"
SAVESTATE_OPTIONS_FILE = "llm_api_options.savestate.yaml"
SAVESTATE_SCRIPT = "features_savestate.sh"
_RUN = ('trtllm-serve {model} --extra_llm_api_options {opts} --host 127.0.0.1 --port "$PORT" &\n'
        'SERVER=$!\ntrap \'kill "$SERVER" 2>/dev/null || true\' EXIT\n'
        'for _ in $(seq 1 900); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 2; done\n'
        'trtllm-spec data regenerate {recipe} --server-url "http://127.0.0.1:$PORT" {shard}"$@"\n')


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


def savestate_options(options: dict, layers: list[int], output_directory: str = "features_savestate") -> dict:
    """The bundle's options with TensorRT-LLM's hidden-state dump instead of speculation (``SaveState``: each
    request runs its context, one token, and its captured layers + final post-norm state are saved)."""
    return {**data_options(options), "speculative_config": {
        "decoding_type": "SaveState", "output_directory": output_directory, "write_interval": 20,
        "file_prefix": "dp_0", "eagle3_layers_to_capture": sorted(int(i) for i in layers)}}


_SAVESTATE_PY = r"""import json, os, sys
from pathlib import Path

import yaml
from tensorrt_llm import LLM, SamplingParams
from tensorrt_llm.llmapi.llm_args import SaveHiddenStatesDecodingConfig

from trtllm_spec.core.recipe_load import load_recipe
from trtllm_spec.data.chat import load_tokenizer
from trtllm_spec.data.features import sequences
from trtllm_spec.data.regenerate import read_done

conv, out, model = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
opts = yaml.safe_load(open("{options}"))
spec = {{k: v for k, v in opts.pop("speculative_config").items() if k != "decoding_type"}}
spec.update(output_directory=out, file_prefix="dp_" + os.environ.get("RANK", "0"))
recipe = load_recipe("{recipe}")
tok = load_tokenizer(model, recipe.resolve_path(recipe.target.chat_template))
seqs = sequences(list(read_done(conv).values()), tok)  # the exact tokens training will read
llm = LLM(model=model, speculative_config=SaveHiddenStatesDecodingConfig(**spec), **opts)
llm.generate([{{"prompt_token_ids": ids}} for ids, _ in seqs.values()], SamplingParams(max_tokens=1, temperature=0))
print(json.dumps({{"conversations": len(seqs), "output_directory": out}}))
"""


def savestate_sh(*, model: str) -> str:
    """DEFERRED (needs TensorRT-LLM on a GPU): dump the target's features with SaveState over the conversations."""
    model = _relative(model, "model")
    return _header("DEFERRED: needs TensorRT-LLM on a GPU node (never run where trtllm-spec is tested). Dumps the "
                   "target's hidden states over the regenerated conversations with TensorRT-LLM's SaveState decoding; "
                   "then train with --set drafter.training.data.features_path=<OUT>.") + \
        'cd "$(dirname "$0")"\nCONV="${1:-conversations.jsonl}"\nOUT="${2:-features_savestate}"\n' + \
        f'python3 - "$CONV" "$OUT" {shlex.quote(model)} <<\'PY\'\n' + \
        _SAVESTATE_PY.format(options=SAVESTATE_OPTIONS_FILE, recipe=RECIPE_FILE) + "PY\n"


def write_data_scripts(ctx, model: str, write_text_atomic, render_yaml) -> list[str]:
    """Write the data files into the bundle; returns their names (called by the bundle stage). An EAGLE-3
    drafter also gets the SaveState options and launch script (its captured layers)."""
    b, r = ctx.bundle, ctx.recipe
    write_text_atomic(b / DATA_OPTIONS_FILE, render_yaml(data_options(ctx.options), profile=r.trtllm_profile))
    write_text_atomic(b / "data.sh", data_sh(model=model))
    write_text_atomic(b / "data.sbatch", data_sbatch(job_name=f"{r.name}-data", shards=8,
                                                     gpus_per_node=r.hardware.tp * r.hardware.pp, model=model))
    (b / "data.sh").chmod(0o755)
    files = [DATA_OPTIONS_FILE, "data.sh", "data.sbatch"]
    from trtllm_spec.drafters.registry import get

    layers = get(r.drafter.type).savestate_layers(r.drafter, ctx.target.config) if ctx.target is not None else None
    if layers is not None:
        write_text_atomic(b / SAVESTATE_OPTIONS_FILE, "# DEFERRED: TensorRT-LLM SaveState (features_savestate.sh)\n"
                          + render_yaml(savestate_options(ctx.options, layers), profile=r.trtllm_profile))
        write_text_atomic(b / SAVESTATE_SCRIPT, savestate_sh(model=model))
        (b / SAVESTATE_SCRIPT).chmod(0o755)
        files += [SAVESTATE_OPTIONS_FILE, SAVESTATE_SCRIPT]
    return files
