"""Stage 6, bundle: TensorRT-LLM LLM API options for the planned D and schedule, the drafter and
target files, serve / bench / SLURM scripts and legacy engine commands. The renderers live in ``deploy``."""

from __future__ import annotations

from pathlib import Path

import yaml

from trtllm_spec.core.bundle import CALIBRATE_RESULTS as CALIBRATE_RESULTS_DIRS
from trtllm_spec.core.bundle import DATASET_FILE, RECIPE_FILE, TARGET_DIR
from trtllm_spec.core.files import write_text_atomic
from trtllm_spec.deploy import scripts as sc
from trtllm_spec.stages.context import BuildContext, StageResult, copy_tree

INCLUDE_TARGET_MAX_BYTES = 2 * 1024**3


def _model_ref(ctx: BuildContext) -> str:
    """What the bundle serves: a copy of a small local target inside the bundle, else the HF id."""
    t = ctx.served_target
    if t is not None and sum(p.stat().st_size for p in t.glob("*") if p.is_file()) <= INCLUDE_TARGET_MAX_BYTES:
        dst = ctx.bundle / TARGET_DIR
        copy_tree(t, dst)
        for extra in ("asset.json",):
            (dst / extra).unlink(missing_ok=True)
        return TARGET_DIR
    return ctx.recipe.target.hf_id or (ctx.target.hf_id or ctx.recipe.target.model)


def _speculative_model(ctx: BuildContext) -> str | None:
    """Copy the drafter into the bundle where the descriptor says (``Mechanism.bundle_drafter``) and return what
    the options name as its model (a folder of the bundle, an HF id, or None)."""
    folder, reference = ctx.mechanism.bundle_drafter(ctx.recipe.drafter, ctx.drafter_kind, ctx.drafter_dir)
    if folder is not None:
        copy_tree(ctx.drafter_dir, ctx.bundle / folder)
        renames = ctx.mechanism.trtllm_tensor_renames(ctx.recipe.drafter)
        if renames:  # the tensor names every TensorRT-LLM release loads (EAGLE-3: midlayer.*; docs/trtllm_compat.md)
            from trtllm_spec.deploy.trtllm_drafter import rename_tensors

            rename_tensors(ctx.bundle / folder, renames)
    return reference


def _options(ctx: BuildContext, spec_model: str | None, max_draft_len: int, schedule: dict | None,
             extra: dict) -> dict:
    """The LLM API options of the recipe with this D and schedule."""
    from trtllm_spec.deploy.trtllm_options import make_llm_api_options
    from trtllm_spec.stages.bench_dataset import required_max_seq_len

    r = ctx.recipe
    batches = r.workload.all_batch_sizes()
    return make_llm_api_options(
        profile=r.trtllm_profile, drafter_type=r.drafter.type, drafter_config=r.drafter,
        speculative_model=spec_model, max_draft_len=max_draft_len, draft_len_schedule=schedule,
        tp=r.hardware.tp, pp=r.hardware.pp, ep=r.hardware.ep, max_batch_size=r.engine.max_batch_size or max(batches),
        max_seq_len=required_max_seq_len(ctx.bench_dataset, isl=r.workload.isl, osl=r.workload.osl,
                                         max_draft_len=max_draft_len, configured=r.engine.max_seq_len),
        batch_sizes=batches, free_gpu_memory_fraction=r.engine.free_gpu_memory_fraction,
        enable_block_reuse=r.engine.enable_block_reuse, kv_cache_dtype=r.quantization.kv_cache_dtype,
        cuda_graphs=r.engine.cuda_graphs, trust_remote_code=r.target.trust_remote_code,
        max_concurrency=extra.get("max_concurrency"),
        drafter_extras={k: v for k, v in extra.items() if k != "max_concurrency"},
        guided_decoding_backend=guided_backend(r))


def guided_backend(recipe) -> str | None:
    """``xgrammar`` (the backend our reference decoder masks with, so measured and served masks agree) when the
    recipe's request mode asks for structured output; None otherwise (no guided decoding)."""
    from trtllm_spec.core.request_mode import recipe_mode

    return "xgrammar" if recipe_mode(recipe).constrained else None


def bundle(ctx: BuildContext) -> StageResult:
    """Writes the bundle (options, scripts, data files); builds no engine (TensorRT-LLM builds or loads one where
    it serves: ``serve.sh``, the ``trtllm`` stage). Named ``engine`` in manifests written before issue 33: a
    manifest's stage names are a record, read by nothing but the overhead report."""
    from trtllm_spec.deploy.trtllm_options import render_yaml

    r, rec = ctx.recipe, ctx.plan.recommendation
    model = ctx.model_ref = _model_ref(ctx)
    spec_model = _speculative_model(ctx)
    from trtllm_spec.stages.bench_dataset import recipe_dataset

    ctx.bench_dataset = recipe_dataset(ctx)  # before the options: max_seq_len must hold every request
    extra = ctx.mechanism.trtllm_extras(ctx.drafter_dir)
    batches = r.workload.all_batch_sizes()
    max_bs = r.engine.max_batch_size or max(batches)
    if rec.max_concurrency is not None:
        extra = extra | {"max_concurrency": rec.max_concurrency}
    ctx.options = _options(ctx, spec_model, rec.max_draft_len, rec.schedule(), extra)
    b = ctx.bundle
    write_text_atomic(b / sc.OPTIONS_FILE, render_yaml(ctx.options, profile=r.trtllm_profile,
                                                       note=_engine_note(ctx.options, rec)))
    write_text_atomic(b / "serve.sh", sc.serve_sh(model=model))
    lo, hi = calibration_batches(batches, max_bs)
    write_text_atomic(b / "bench.sh", sc.bench_sh(model=ctx.recipe.target.hf_id or model, model_path=model
                                                  if model == "target" else None,
                                                  concurrency=bench_levels(batches, hi)))
    write_text_atomic(b / DATASET_FILE, ctx.bench_dataset.jsonl())
    files = [sc.OPTIONS_FILE, "serve.sh", "bench.sh", "replan.sh", DATASET_FILE]
    spec_d = rec.max_draft_len
    if rec.max_draft_len == 0:
        alt, spec_d = _speculative_alternative(ctx, model, spec_model, extra)
        files += alt
    else:
        files += _plain_alternative(ctx, model)
    second = _calibrate_alternative(ctx, model, spec_model, extra, spec_d, (lo, hi)) if spec_d else []
    files += second
    write_text_atomic(b / "replan.sh", sc.replan_sh(**_replan_reports(rec.max_draft_len, lo),
                                                    calibrate_report=f"{CALIBRATE_RESULTS}/report_c{lo}.json"
                                                    if second else None, high_batch=hi,
                                                    calibrate_main_report=f"{CALIBRATE_MAIN_RESULTS}/report_c{lo}.json"
                                                    if second else None))
    for f in ("serve.sh", "bench.sh", "replan.sh"):
        (b / f).chmod(0o755)
    table, table_note = _dspark_cost_table(ctx)
    files += table
    files += _multinode(ctx, model)
    from trtllm_spec.deploy.data_scripts import write_data_scripts  # issue 15: data.sh / data.sbatch

    files += write_data_scripts(ctx, model, write_text_atomic, render_yaml)
    if r.engine.backend == "tensorrt":
        files += _legacy_engines(ctx, model, spec_model, max_bs)
    return StageResult("bundle", "done", detail=f"{', '.join(files)}; model {model}"
                       + (f", drafter {spec_model}" if spec_model else "")
                       + f"; dataset.jsonl: {ctx.bench_dataset.summary()}, max_seq_len {ctx.options['max_seq_len']}"
                       + (f"; {table_note}" if table_note else ""))


def _engine_note(options: dict, rec) -> str:
    """What the engine will do at each batch size with these options (the plan's rule where it has one)."""
    spec = options.get("speculative_config")
    if not spec:
        return "No speculation: the plan predicts none pays at the planned batch sizes (report/overhead.md)."
    if rec.draft_len_rule:
        return f"Speculation: {rec.draft_len_rule}."
    if spec.get("draft_len_schedule"):
        return (f"Speculation: D by batch size as draft_len_schedule {spec['draft_len_schedule']} (TensorRT-LLM "
                f"{rec.trtllm_profile} rules; docs/trtllm_compat.md).")
    if spec.get("max_concurrency"):
        return f"Speculation: D = {spec['max_draft_len']} up to batch {spec['max_concurrency']}, off above it."
    return f"Speculation: D = {spec['max_draft_len']} at every batch size."


ALT_OPTIONS_FILE = sc.SPECULATIVE_OPTIONS_FILE


def _speculative_alternative(ctx: BuildContext, model: str, spec_model: str | None, extra: dict
                             ) -> tuple[list[str], int]:
    """When the planner recommends no speculation, still write the recipe's drafter at its best predicted D
    (smallest planned batch) as a second options file and a bench script for it: the prediction can then be
    checked on the GPU with one command (``bash bench_speculative.sh`` next to ``bash bench.sh``)."""
    from trtllm_spec.deploy.trtllm_options import render_yaml

    r = ctx.recipe
    batches = r.workload.all_batch_sizes()
    cands = [c for c in ctx.plan.candidates if c["mechanism"] == r.drafter.type and c["draft_len"] > 0
             and c["batch_size"] == min(batches) and c.get("feasible", True)]
    if not cands:
        return [], 0
    best = max(cands, key=lambda c: c["speedup"])
    d = best["draft_len"]
    options = _options(ctx, spec_model, d, None, extra)
    b = ctx.bundle
    header = (f"# Not recommended by the planner (predicted {best['speedup']:.2f}x at batch {best['batch_size']}, "
              f"D={d}): kept to measure on the GPU against llm_api_options.yaml\n")
    write_text_atomic(b / ALT_OPTIONS_FILE, header + render_yaml(options, profile=r.trtllm_profile))
    _lo, hi = calibration_batches(batches, r.engine.max_batch_size or max(batches))
    write_text_atomic(b / "bench_speculative.sh", sc.bench_sh(
        model=r.target.hf_id or model, model_path=model if model == "target" else None,
        concurrency=bench_levels(batches, hi),
        options_file=ALT_OPTIONS_FILE, report_dir="bench_results_speculative"))
    (b / "bench_speculative.sh").chmod(0o755)
    return [ALT_OPTIONS_FILE, "bench_speculative.sh"], d


PLAIN_OPTIONS_FILE, CALIBRATE_OPTIONS_FILE = sc.PLAIN_OPTIONS_FILE, sc.CALIBRATE_OPTIONS_FILE
CALIBRATE_MAIN_OPTIONS_FILE = sc.CALIBRATE_MAIN_OPTIONS_FILE
CALIBRATE_RESULTS, CALIBRATE_MAIN_RESULTS = (CALIBRATE_RESULTS_DIRS[f] for f in (CALIBRATE_OPTIONS_FILE,
                                                                                  CALIBRATE_MAIN_OPTIONS_FILE))


def calibration_batches(batches: list[int], max_batch_size: int) -> tuple[int, int | None]:
    """The two concurrencies the host-cost calibration runs at (the step model's per-sequence terms need two,
    planner/step.py): the smallest planned batch and the largest (or, with one planned batch, 8 times it, within
    the engine's max_batch_size); None where the engine runs one batch size only."""
    lo = min(batches)
    hi = max(batches) if max(batches) > lo else min(8 * lo, max_batch_size)
    return lo, (hi if hi > lo else None)


def bench_levels(batches: list[int], high: int | None) -> list[int]:
    """The concurrencies a bench script runs: the planned batch sizes and the calibration's second one."""
    return sorted(set(batches) | ({high} if high else set()))


def second_draft_len(d: int, limit: int | None) -> int | None:
    """A second D for host-cost calibration, far enough from ``d`` to separate the per-draft-step term: d + 2
    where the drafter allows it, else d - 2, else the neighbour; None where the drafter runs one D only."""
    for cand in (d + 2, d - 2, d + 1, d - 1):
        if cand >= 1 and (limit is None or cand <= limit):
            return cand
    return None


def _calibrate_alternative(ctx: BuildContext, model: str, spec_model: str | None, extra: dict, d: int,
                           levels: tuple[int, int | None]) -> list[str]:
    """For a drafter with a model (chain: host work once per draft step; block: one pass per iteration), the
    speculative options at a second D, fixed (no schedule, so the second concurrency runs that D), and a bench
    script at the calibration's two concurrencies: with the plain runs at both and the speculative run at the
    smallest, reports that identify the host-cost terms (one D identifies only spec_iteration_s + D draft_step_s
    and no per-sequence speculative cost)."""
    from trtllm_spec.deploy.trtllm_options import render_yaml

    r = ctx.recipe
    shape = ctx.target.shape if ctx.target is not None else None
    if shape is None or not ctx.mechanism.cost(shape, r.drafter).passes:  # a model-free drafter (n-gram, SA): no
        return []  # pass to price and no schedule in any release, so bench.sh's second concurrency serves
    if ctx.mechanism.only_draft_len(r.drafter) is not None:
        return []
    limit = ctx.mechanism.max_draft_len(shape, r.drafter)
    d2 = second_draft_len(d, limit)
    if d2 is None:
        return []
    extra = {k: v for k, v in extra.items() if k != "max_concurrency"}
    options = _options(ctx, spec_model, d2, None, extra)
    b = ctx.bundle
    header = (f"# llm_api_options.yaml's drafter at a second draft length (D={d2}, not a recommendation): the third "
              "run replan.sh fits the host costs with (bench_calibrate.sh)\n")
    write_text_atomic(b / CALIBRATE_OPTIONS_FILE, header + render_yaml(options, profile=r.trtllm_profile))
    main = _options(ctx, spec_model, d, None, extra)
    write_text_atomic(b / CALIBRATE_MAIN_OPTIONS_FILE, f"# llm_api_options.yaml's drafter at its D={d} with no "
                      "draft_len_schedule (not a recommendation): run at the second concurrency it is one D's step, "
                      "which replan.sh fits the per-sequence host costs with (bench_calibrate.sh)\n"
                      + render_yaml(main, profile=r.trtllm_profile))
    write_text_atomic(b / "bench_calibrate.sh", sc.bench_sh(
        model=r.target.hf_id or model, model_path=model if model == "target" else None,
        concurrency=[c for c in levels if c], options_file=CALIBRATE_OPTIONS_FILE, report_dir=CALIBRATE_RESULTS,
        also=[(CALIBRATE_MAIN_OPTIONS_FILE, CALIBRATE_MAIN_RESULTS)],
        purpose=f"Throughput/latency of {{model}} with its drafter at D={d2} and at D={d} without a schedule (fixed "
                "draft lengths at two concurrencies for replan.sh's host-cost calibration)"))
    (b / "bench_calibrate.sh").chmod(0o755)
    return [CALIBRATE_OPTIONS_FILE, CALIBRATE_MAIN_OPTIONS_FILE, "bench_calibrate.sh"]


def _replan_reports(max_draft_len: int, batch: int) -> dict[str, str]:
    """replan.sh's default reports: the speculative run (acceptance) and the plain run (host-cost calibration)."""
    if max_draft_len:
        spec, plain, bench, plain_bench = "bench_results", "bench_results_plain", "bench.sh", "bench_plain.sh"
    else:
        spec, plain, bench, plain_bench = "bench_results_speculative", "bench_results", "bench_speculative.sh", "bench.sh"
    return {"report": f"{spec}/report_c{batch}.json", "plain_report": f"{plain}/report_c{batch}.json",
            "bench": bench, "plain_bench": plain_bench}


def _plain_alternative(ctx: BuildContext, model: str) -> list[str]:
    """Beside speculative options, the same options without speculation and a bench script for them: the plain
    run that, with bench.sh's, calibrates the host costs (replan.sh)."""
    from trtllm_spec.deploy.trtllm_options import render_yaml

    options = {k: v for k, v in ctx.options.items() if k != "speculative_config"}
    r, b = ctx.recipe, ctx.bundle
    header = "# llm_api_options.yaml without speculation: the plain run replan.sh calibrates host costs with\n"
    write_text_atomic(b / PLAIN_OPTIONS_FILE, header + render_yaml(options, profile=r.trtllm_profile))
    batches = r.workload.all_batch_sizes()
    _lo, hi = calibration_batches(batches, r.engine.max_batch_size or max(batches))
    write_text_atomic(b / "bench_plain.sh", sc.bench_sh(
        model=r.target.hf_id or model, model_path=model if model == "target" else None,
        concurrency=bench_levels(batches, hi), options_file=PLAIN_OPTIONS_FILE, report_dir="bench_results_plain",
        purpose="Throughput/latency of {model} without speculation (for replan.sh's host-cost calibration)"))
    (b / "bench_plain.sh").chmod(0o755)
    return [PLAIN_OPTIONS_FILE, "bench_plain.sh"]


DSPARK_TABLE_FILE = "dspark_cost_table.json"
DSPARK_TABLE_NOTE = (
    "dspark_cost_table.json: the planner's step model as DSpark's confidence scheduler prices a step, T(bs, L) = "
    "bias + alpha(bs) + theta(bs (L + 1)), in the fields NVIDIA/TensorRT-LLM documents for its step-cost table "
    "(docs/source/features/dspark-confidence-scheduling.md @2391b203: token_counts, step_time_ms, fixed_overhead_ms, "
    "batch_sizes, batch_overhead_ms; newest main's confidence_sps_table_path). TensorRT-LLM {release} reads "
    "confidence_cost_table_path, whose file format no source of that release confirms (its DSparkDecodingConfig "
    "reference page lists the field without one), so the options leave enable_confidence_scheduling off; check the "
    "format against the release before pointing confidence_cost_table_path at this file")


def _dspark_cost_table(ctx: BuildContext) -> tuple[list[str], str]:
    """For a drafter TensorRT-LLM schedules from a step-cost table (DSpark) on a release with confidence
    scheduling: the table (planner/dspark_table.py) beside the options, unconfirmed for the release (said in the
    bundle stage's record, the manifest), the scheduler left off; (files, the note)."""
    from trtllm_spec.core.files import write_json_atomic
    from trtllm_spec.core.releases import get as release_record

    r = ctx.recipe
    if not ctx.mechanism.step_cost_table or not release_record(r.trtllm_profile).confidence_scheduling \
            or ctx.target is None:
        return [], ""
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.dspark_table import cost_table
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import plan_context

    req = plan_inputs(r, mechanisms=MECHANISMS).request
    cost = ctx.mechanism.cost(req.target, r.drafter)
    block = ctx.mechanism.only_draft_len(r.drafter) or max(1, ctx.plan.recommendation.max_draft_len)
    sizes = (ctx.options.get("cuda_graph_config") or {}).get("batch_sizes") or r.workload.all_batch_sizes()
    table = cost_table(plan_context(req), cost, block, sizes)
    write_json_atomic(ctx.bundle / DSPARK_TABLE_FILE, table)
    return [DSPARK_TABLE_FILE], DSPARK_TABLE_NOTE.format(release=release_record(r.trtllm_profile).name)


def _multinode(ctx: BuildContext, model: str) -> list[str]:
    h, out = ctx.recipe.hardware, []
    world = h.tp * h.pp
    if h.nodes > 1:
        write_text_atomic(ctx.bundle / "serve_multinode.sh", sc.multinode_serve_sh(
            model=model, world_size=world, gpus_per_node=min(h.gpus_per_node, world)))
        write_text_atomic(ctx.bundle / "slurm_serve.sbatch", sc.slurm_serve_sbatch(
            job_name=ctx.recipe.name, nodes=h.nodes, gpus_per_node=min(h.gpus_per_node, world), model=model,
            image=sc.serve_image(ctx.recipe.trtllm_profile)))
        out += ["serve_multinode.sh", "slurm_serve.sbatch"]
    dist = getattr(ctx.recipe.drafter, "training", None)
    if dist is not None and dist.distributed.strategy != "none":  # the launch train/distributed.py checks
        from trtllm_spec.train.launch import torchrun_script

        cmd = ["trtllm-spec", "train", ctx.recipe_file.name, "--out", "train"]
        write_text_atomic(ctx.bundle / "slurm_train.sbatch", sc.slurm_train_sbatch(
            job_name=f"{ctx.recipe.name}-train", nodes=dist.distributed.nnodes,
            gpus_per_node=dist.distributed.nproc_per_node, train_command=cmd))
        write_text_atomic(ctx.bundle / "train_torchrun.sh", torchrun_script(dist.distributed, ctx.recipe_file.name))
        (ctx.bundle / "train_torchrun.sh").chmod(0o755)
        out += ["slurm_train.sbatch", "train_torchrun.sh"]
    return out


def _legacy_engines(ctx: BuildContext, model: str, draft: str | None, max_bs: int) -> list[str]:
    w = ctx.recipe.workload
    cmds = sc.legacy_engine_commands(target_model=model, draft_model=draft or "draft_model",
                                     max_draft_len=max(1, ctx.plan.recommendation.max_draft_len),
                                     max_batch_size=max_bs, max_seq_len=ctx.options["max_seq_len"],
                                     max_input_len=max([w.isl] + [q.prompt_tokens for q in ctx.bench_dataset.requests]),
                                     tp=ctx.recipe.hardware.tp, pp=ctx.recipe.hardware.pp)
    write_text_atomic(ctx.bundle / "engines.sh", sc.engines_sh(cmds))
    (ctx.bundle / "engines.sh").chmod(0o755)
    return ["engines.sh"]


def dump_recipe(ctx: BuildContext) -> None:
    from trtllm_spec.core.recipe_load import recipe_to_dict

    (ctx.bundle / RECIPE_FILE).write_text(yaml.safe_dump(recipe_to_dict(ctx.recipe), sort_keys=False))


def bundle_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
