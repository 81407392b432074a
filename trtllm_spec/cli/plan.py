"""``trtllm-spec plan``: draft length D and draft_len_schedule from the cost model and the five guidelines."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import (
    check_calibrate_args,
    echo_interval_change,
    echo_json,
    field_choices,
    main,
    parse_int_list,
    release_choice,
    set_option,
)
from trtllm_spec.core.recipe import DEFAULT_DRAFTER, QuantizationConfig, TargetConfig
from trtllm_spec.drafters.registry import MECHANISMS

QUANT_METHODS = field_choices(QuantizationConfig, "method", drop=("none",))
DTYPES = field_choices(TargetConfig, "dtype", drop=("auto",)) + QUANT_METHODS

FLAG_FIELDS = {
    "target": "target.model", "drafter": "drafter.type", "drafter_layers": "drafter.num_layers",
    "draft_vocab_size": "drafter.draft_vocab_size", "draft_model": "drafter.model", "gpu": "hardware.gpu",
    "num_gpus": "hardware.num_gpus", "tp": "hardware.tp", "pp": "hardware.pp", "ep": "hardware.ep",
    "batch_sizes": "workload.batch_sizes", "isl": "workload.isl", "osl": "workload.osl",
    "latency_target_ms": "workload.latency_target_ms", "acceptance": "planner.acceptance",
    "max_draft_len": "planner.max_draft_len", "draft_len": "draft_len", "trtllm_version": "engine.trtllm_version",
    "kv_dtype": "quantization.kv_cache_dtype", "host_costs": "planner.host_costs",
}


def flag_origins(flags: dict, overrides: tuple[str, ...] = (), with_recipe: bool = True) -> dict[str, str]:
    """The recipe key paths these flags set -> the flag the user typed (a later ``--set KEY=`` wins: its key).
    Without a recipe every field with a flag is named as its flag: its value came from the flag or the default,
    and the flag is how to change it."""
    origins = {path: f"--{key.replace('_', '-')}" for key, path in FLAG_FIELDS.items()
               if flags.get(key) is not None or not with_recipe}
    if flags.get("dtype") is not None:  # quantization.method too, but a fix naming 'method: none' stays a key
        origins["target.dtype"] = "--dtype"
    if flags.get("no_compare"):
        origins["planner.compare_mechanisms"] = "--no-compare"
    if flags.get("compare_acceptance"):  # its keys are the user's NAMEs, not fields: the section is the flag
        origins["planner.compare_acceptance"] = "--compare-acceptance"
    if flags.get("serving") is not None:
        origins |= {f"engine.serving.{k}": "--serving" for k in ("framework", "version")}
    for item in overrides:
        origins.pop(item.partition("=")[0].strip(), None)
    return origins


def apply_flags(data: dict, flags: dict) -> dict:
    """Each plan flag is a recipe field: flags win over --recipe (and --set wins over flags)."""
    from trtllm_spec.core.recipe_load import set_path

    for key, path in FLAG_FIELDS.items():
        value = flags.get(key)
        if value is None:
            continue
        if key in ("acceptance", "target", "gpu", "host_costs") and Path(str(value)).exists():
            value = str(Path(value).resolve())  # flags are relative to the working directory
        elif isinstance(value, Path):
            value = str(value)  # a missing file is reported by its reader, naming the path
        set_path(data, path.split("."), value, f"--{key.replace('_', '-')}")
    dtype = flags.get("dtype")
    if dtype in QUANT_METHODS:
        set_path(data, ["quantization", "method"], dtype, "--dtype")
    elif dtype is not None:
        set_path(data, ["quantization", "method"], "none", "--dtype")
        set_path(data, ["target", "dtype"], dtype, "--dtype")
    if flags.get("no_compare"):
        set_path(data, ["planner", "compare_mechanisms"], False, "--no-compare")
    serving = flags.get("serving")
    if serving is not None:
        framework, sep, version = str(serving).partition(":")
        if not sep or not framework or not version:
            from trtllm_spec.errors import UserError

            raise UserError(f"--serving {serving!r}: expected FRAMEWORK:VERSION, the engine you serve (vllm or sglang) "
                            "and its release, e.g. --serving vllm:0.10.2")
        set_path(data, ["engine", "serving"], {"framework": framework.lower(), "version": version}, "--serving")
    for item in flags.get("compare_acceptance") or ():
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            from trtllm_spec.errors import UserError

            raise UserError(f"--compare-acceptance {item!r}: expected NAME=FILE (a drafter type and its measured "
                            "acceptance), e.g. --compare-acceptance suffix=measured/speculation_profile.json")
        value = str(Path(file).resolve()) if Path(file).exists() else file
        set_path(data, ["planner", "compare_acceptance", name], value, "--compare-acceptance")
    return data


@main.command("plan")
@click.option("--recipe", "recipe_file", type=click.Path(path_type=Path), help="Start from this recipe.")
@click.option("--target", help="HF checkpoint folder or config.json, preset name, or fetched asset.")
@click.option("--drafter", type=click.Choice(tuple(MECHANISMS)), help="Drafting mechanism (default: the recipe's, "
              f"else {DEFAULT_DRAFTER}).")
@click.option("--gpu", help="GPU name (see 'trtllm-spec hw list') or a file from 'trtllm-spec hw probe'.")
@click.option("--num-gpus", type=int, help="GPUs the deployment uses (hardware.num_gpus), a multiple of tp x pp.")
@click.option("--tp", type=int, help="Tensor-parallel size.")
@click.option("--pp", type=int, help="Pipeline-parallel size.")
@click.option("--ep", type=int, help="MoE expert-parallel size.")
@click.option("--batch-sizes", help="Comma-separated, e.g. 1,8,64.")
@click.option("--isl", type=int, help="Input length (tokens).")
@click.option("--osl", type=int, help="Output length (tokens).")
@click.option("--latency-target-ms", type=float, help="Time-per-output-token target.")
@click.option("--acceptance", type=click.Path(path_type=Path),
              help='JSON: {"conditional_rates": [...]}, {"acceptance_length": {"1": 1.8}} or a speculation profile.')
@click.option("--category", help="With a speculation profile: plan with this category instead of 'overall'.")
@click.option("--drafter-layers", type=int, help="Drafter decoder layers.")
@click.option("--draft-vocab-size", type=int, help="EAGLE-3 draft vocabulary size.")
@click.option("--draft-model", help="Draft model (path/preset) for --drafter draft_model.")
@click.option("--max-draft-len", type=int, help="Largest D to consider (default 8).")
@click.option("--draft-len", type=int, help="Fix D instead of choosing it.")
@click.option("--dtype", type=click.Choice(DTYPES),
              help="Target weight precision (default: the checkpoint's).")
@click.option("--kv-dtype", type=click.Choice(field_choices(QuantizationConfig, "kv_cache_dtype")),
              help="KV-cache precision (quantization.kv_cache_dtype).")
@click.option("--trtllm-version", type=release_choice(),
              help="Schedule rules of this release.")
@click.option("--serving", metavar="FRAMEWORK:VERSION", help="Price the step for the engine you serve, vllm:VERSION or "
              "sglang:VERSION (engine.serving: its release's host-cost profile); default TensorRT-LLM at "
              "--trtllm-version.")
@click.option("--no-compare", is_flag=True, help="Only the chosen mechanism (skip guideline 5's comparison).")
@click.option("--host-costs", type=click.Path(path_type=Path),
              help="A host_costs.json from an earlier --calibrate / replan.sh (planner.host_costs).")
@click.option("--calibrate", is_flag=True, help="Fit the host costs to the REPORTS given after the options, then "
              "plan with them: trtllm-bench reports (a plain and a speculative run of the same bundle), or 'measure "
              "served' folders of any engine measured with --serves-draft-len (0 and a D > 0: the plan then "
              "predicts that engine).")
@click.argument("reports", nargs=-1, type=click.Path(path_type=Path), metavar="[REPORT ...]")
@click.option("--interval-level", type=float, default=None, help="Coverage of the predicted-speedup intervals, a "
              "fraction in (0, 1) (default 0.8).")
@click.option("--compare-acceptance", multiple=True, metavar="NAME=FILE", help="Guideline 5: compare drafter type "
              "NAME on this measured acceptance (a speculation profile) instead of its published default; repeat "
              "per mechanism.")
@set_option
@click.option("--out", type=click.Path(path_type=Path), help="Write plan.json, plan.md and plots here.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--json", "as_json", is_flag=True, help="Print plan.json to stdout.")
def plan_cmd(recipe_file: Path | None, overrides: tuple[str, ...], out: Path | None, force: bool,
             as_json: bool, category: str | None, calibrate: bool, reports: tuple[Path, ...],
             interval_level: float | None, **flags) -> None:
    """Choose D (and a draft_len_schedule per batch size) for a target, drafter, GPU and workload.

    Example: trtllm-spec plan --target llama-3.1-8b-instruct --drafter eagle3 --gpu h100 --batch-sizes 1,8,64
    --isl 1024 --osl 512 --out plan/

    With your engine's host costs (runs at two concurrencies: one cannot separate the per-sequence costs):
    trtllm-spec plan --recipe r.yaml --out plan/ --calibrate bench_results_plain/report_c1.json
    bench_results_plain/report_c8.json bench_results/report_c1.json bench_results/report_c8.json
    """
    from trtllm_spec.cli.common import record_flag_origins
    from trtllm_spec.core.recipe_load import apply_overrides, load_recipe, recipe_from_dict, recipe_to_dict
    from trtllm_spec.errors import UserError

    flags["batch_sizes"] = parse_int_list(flags.get("batch_sizes"), "--batch-sizes")
    if interval_level is not None:
        from trtllm_spec.planner.interval import check_level

        check_level(interval_level)
    record_flag_origins(flag_origins(flags, overrides, recipe_file is not None))
    check_calibrate_args("plan", reports, calibrate, "plain and speculative runs at two concurrencies, e.g. "
                         "--calibrate bench_results_plain/report_c1.json bench_results_plain/report_c8.json "
                         "bench_results/report_c1.json bench_results/report_c8.json")
    if out is None and not as_json:
        raise UserError("plan needs --out DIR (files) or --json (stdout), or both")
    if recipe_file is None and flags.get("target") is None:
        raise UserError("plan needs --target (path, preset or asset) or --recipe FILE")
    if recipe_file is not None:
        base = recipe_to_dict(load_recipe(recipe_file))
    else:
        base = {"name": "plan", "target": {"model": flags["target"]}, "drafter": {"type": DEFAULT_DRAFTER}}
    data = apply_overrides(apply_flags(base, flags), overrides)
    recipe = recipe_from_dict(data, str(recipe_file or "plan flags"))
    if recipe_file is not None:
        recipe._base_dir = recipe_file.resolve().parent
    from trtllm_spec.stages.plan import run_plan

    result = run_plan(recipe, out, force=force, category=category, calibrate=list(reports) or None,
                      interval_level=interval_level)
    if as_json:
        echo_json(result.plan.to_json())
    if out is not None:
        rec = result.plan.recommendation
        sched = rec.draft_len_schedule
        click.echo(f"{rec.mechanism}: max_draft_len {rec.max_draft_len}"
                   + (f", draft_len_schedule {sched}" if sched else "")
                   + f"  ->  {out}/plan.md", err=as_json)
        if rec.memory and not rec.by_batch:
            click.echo(rec.memory["note"], err=as_json)
        elif (rec.speculation_limit or {}).get("stops_paying_at") is not None:
            click.echo(rec.speculation_limit["note"], err=as_json)
        if result.host_costs is not None:
            t = result.host_costs.terms()
            click.echo(f"host costs fitted ({out}/host_costs.json): " + ", ".join(f"{k} {v * 1e3:.3f} ms"
                                                                                   for k, v in t.items()), err=as_json)
            echo_interval_change(result.plan.to_json(), as_json)
