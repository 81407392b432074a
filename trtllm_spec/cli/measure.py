"""``trtllm-spec measure``: acceptance of a drafter on real prompts -> speculation_profile.json + report."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, field_choices, field_default, main, parse_int_list
from trtllm_spec.cli.request_mode import request_mode_options
from trtllm_spec.core.recipe import MeasureConfig as M
from trtllm_spec.drafters.registry import FOLDERLESS


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _categories(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", "").split(",") if c]


# the options that --from-trtllm-bench / --from-trtllm-metrics take (the engine already measured)
ENGINE_REPORT_PARAMS = ("bench_report", "metrics", "bundle", "draft_len", "temperature", "out", "force", "as_json")
# --allow-long with --from-trtllm-*: refused (nothing is generated), by the check of options a report does not read
# the options only --engine openai reads, and those of a measurement here that it does not
SERVED_ONLY = ("server_url", "server_model", "concurrency", "request_timeout", "recipe_file", "gpu")
NOT_SERVED = ("drafter", "draft_len", "dtype", "device", "reference_engine", "block_sweep", "bundle", "bench_report",
              "metrics", "max_matching_ngram_size", "global_pool", "global_pool_size", "sa_enhancer_threshold",
              "compare_reference")
# what --engine llamacpp does not read (it runs llama.cpp's own decoder and our decoder with its defaults)
NOT_LLAMACPP = ("reference_engine", "block_sweep", "bundle", "bench_report", "metrics", "server_url", "server_model",
                "concurrency", "request_timeout", "recipe_file", "gpu", "max_matching_ngram_size", "global_pool",
                "global_pool_size", "sa_enhancer_threshold")


def _given(names) -> list[str]:
    ctx = click.get_current_context()
    return [f"--{n.replace('_', '-')}".replace("--recipe-file", "--recipe").replace("--bench-report",
            "--from-trtllm-bench").replace("--metrics", "--from-trtllm-metrics") for n in names
            if ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]


@main.command("measure")
@request_mode_options
@click.option("--target", help="Target HF checkpoint folder or fetched asset (e.g. smollm2-135m); required except "
              "with --from-trtllm-bench / --from-trtllm-metrics.")
@click.option("--drafter", help="Exported drafter folder (EAGLE-3, EAGLE-1/MTP head, DFlash/DSpark), a draft model "
              "folder, or a model-free mechanism: " + ", ".join(repr(n) for n in FOLDERLESS) + ". With --engine "
              "trtllm the bundle's drafter is used.")
@click.option("--max-matching-ngram-size", type=int, help="ngram: longest n-gram matched (default 3); suffix: -1 = "
              "the longest suffix match (default), k > 0 = sizes k down to 1.")
@click.option("--global-pool", is_flag=True, help="suffix, or with --sa-enhancer-threshold: match across the suite's "
              "earlier prompts and outputs too (TensorRT-LLM enable_global_pool), in suite order.")
@click.option("--global-pool-size", type=int, help="suffix --global-pool: automaton slots (default 64); the oldest "
              "finished prompt leaves first.")
@click.option("--sa-enhancer-threshold", type=int, help="EAGLE-3 / MTP folder: TensorRT-LLM's SA enhancer; suffix "
              "drafts replace the head's where the match is at least this long (sa_config.threshold).")
@click.option("--draft-len", type=int, help="D: drafts per target iteration (required with --engine pytorch).")
@click.option("--suite", default=field_default(M, "suite"), show_default=True, metavar="speed-lite|FILE|DIR",
              help="Prompt suite: the built-in speed-lite (speed-lite-modes: one category per request mode), or your own JSONL file (or a folder of them, one per "
              "category): OpenAI 'messages', 'prompt' or ShareGPT 'conversations' per line, optional 'category'.")
@click.option("--training-data", type=click.Path(path_type=Path),
              help="With your own --suite: the drafter's training conversations (JSONL); suite prompts found there "
              "are refused (the packaged train pools are always checked).")
@click.option("--allow-overlap", is_flag=True, help="Measure suite prompts that are also training prompts, with a "
              "warning giving their count.")
@click.option("--categories", help="Comma-separated suite categories (default: all).")
@click.option("--num-prompts", type=int, default=field_default(M, "num_prompts"), show_default=True,
              help="Prompts per category.")
@click.option("--max-new-tokens", type=int, default=field_default(M, "max_new_tokens"), show_default=True)
@click.option("--temperature", type=float, default=field_default(M, "temperature"), show_default=True,
              help="0 = greedy (outputs compared).")
@click.option("--dtype", type=click.Choice(field_choices(M, "dtype")), default=field_default(M, "dtype"),
              show_default=True, help="Precision of the PyTorch reference run (auto: runtime/device.py's rule, bf16 where fast).")
@click.option("--seed", type=int, default=field_default(M, "seed"), show_default=True,
              help="Suite selection and sampling seed.")
@click.option("--device", type=click.Choice(field_choices(M, "device")), default=field_default(M, "device"),
              show_default=True,
              help="Where the reference decoder runs (auto: CUDA when torch sees a GPU).")
@click.option("--reference-engine", type=click.Choice(field_choices(M, "reference_engine")),
              default=field_default(M, "reference_engine"), show_default=True,
              help="What runs the target in the reference decoder: ours (Llama, Mistral, Qwen2, Qwen3; faster), hf "
              "(transformers: any architecture, e.g. MoE), auto (ours where it runs the target, else hf).")
@click.option("--chat-template", type=click.Path(path_type=Path), help="Jinja chat template, if the checkpoint lacks one.")
@click.option("--block-sweep", help="DFlash/DSpark: also measure these draft lengths, e.g. 1,2,4 (one run each).")
@click.option("--engine", type=click.Choice(["pytorch", "trtllm", "openai", "llamacpp"]), default="pytorch",
              show_default=True,
              help="pytorch: the reference decoder here; trtllm: TensorRT-LLM's LLM API on a GPU node; openai: a "
              "served OpenAI-compatible endpoint (--server-url), measured from streamed responses; llamacpp: "
              "llama.cpp's own speculative decoding of the drafter (native build, GGUFs converted here; the request mode; "
              "--dtype auto = fp32).")
@click.option("--compare-reference/--no-compare-reference", default=True, show_default=True,
              help="With --engine llamacpp: also run our reference decoder on the same prompts and report both ALs, "
              "their difference per category and whether the outputs equal target-only greedy.")
@click.option("--server-url", metavar="URL", help="With --engine openai: the server, e.g. http://127.0.0.1:8000 "
              "(trtllm-serve, vLLM, SGLang, llama.cpp; 'trtllm-spec assets serve' starts one here).")
@click.option("--server-model", metavar="ID", help="With --engine openai: the model id to request, when the server "
              "lists several in /v1/models.")
@click.option("--concurrency", default="1,4,16", show_default=True, metavar="N[,N...]",
              help="With --engine openai: requests in flight, one measurement per level.")
@click.option("--request-timeout", type=float, default=300.0, show_default=True,
              help="With --engine openai: seconds one streamed request may take.")
@click.option("--recipe", "recipe_file", type=click.Path(path_type=Path), help="With --engine openai: the recipe "
              "whose planner prediction (hardware, drafter, acceptance) is printed beside the measurement, and "
              "its target unless --target is given.")
@click.option("--gpu", metavar="NAME|FILE", help="With --engine openai: the hardware of the prediction (a catalogue "
              "name, or a 'hw probe' file of the server's machine) instead of the recipe's.")
@click.option("--bundle", type=click.Path(path_type=Path), help="With --engine trtllm: a 'trtllm-spec build' folder "
              "(its llm_api_options.yaml).")
@click.option("--from-trtllm-bench", "bench_report", type=click.Path(path_type=Path),
              help="Read a trtllm-bench --report_json file (the bundle's bench.sh writes them) instead of measuring.")
@click.option("--from-trtllm-metrics", "metrics", metavar="FILE|URL",
              help="Read trtllm-serve iteration stats (a saved /metrics JSON, or http://HOST:PORT/metrics) instead "
              "of measuring; needs enable_iter_perf_stats (the bundle's options set it).")
@click.option("--out", type=click.Path(path_type=Path), help="Write speculation_profile.json, report.md, plots here.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder (only one trtllm-spec wrote).")
@click.option("--allow-long", is_flag=True, help="Start a measurement above the budget limit (200,000 generated "
              "tokens: requests x --max-new-tokens; the budget is printed first either way).")
@click.option("--json", "as_json", is_flag=True, help="Print speculation_profile.json to stdout.")
def measure_cmd(target: str | None, drafter: str | None, max_matching_ngram_size: int | None, global_pool: bool,
                global_pool_size: int | None, sa_enhancer_threshold: int | None, draft_len: int | None, suite: str,
                training_data: Path | None, allow_overlap: bool, categories: str | None,
                num_prompts: int, max_new_tokens: int, temperature: float, dtype: str, seed: int, device: str,
                reference_engine: str, chat_template: Path | None, block_sweep: str | None, engine: str,
                server_url: str | None, server_model: str | None, concurrency: str, request_timeout: float,
                compare_reference: bool, recipe_file: Path | None, gpu: str | None, bundle: Path | None,
                bench_report: Path | None, metrics: str | None, out: Path | None, force: bool, allow_long: bool,
                as_json: bool, request_mode=None) -> None:
    """Measure acceptance length (overall, per category, per draft position) and speedup of a drafter against
    its target on the speed-lite suite; the profile feeds 'trtllm-spec plan --acceptance'.

    Example: trtllm-spec measure --target smollm2-135m --drafter ngram --draft-len 4 --categories coding,math
    --num-prompts 2 --out measure/

    A served endpoint (TTFT, TPOT, tokens/s per user and server at each concurrency, beside the planner's
    prediction): trtllm-spec measure --engine openai --server-url http://127.0.0.1:8000 --target smollm2-135m
    --concurrency 1,4,16 --num-prompts 2 --out served/
    """
    from trtllm_spec.errors import CheckFailed, UserError
    from trtllm_spec.measure.report import lossless_problem
    from trtllm_spec.stages.measure import run_engine_report, run_measure

    if out is None and not as_json:
        raise UserError("measure needs --out DIR (files) or --json (stdout), or both")
    if engine == "openai":
        _served(target, server_url, server_model, concurrency, request_timeout, recipe_file, gpu, suite,
                training_data, allow_overlap, categories, num_prompts, max_new_tokens, temperature, seed,
                chat_template, out, force, as_json, allow_long, request_mode=request_mode)
        return
    if _given(("compare_reference",)) and engine != "llamacpp":
        raise UserError(f"--compare-reference/--no-compare-reference: read by --engine llamacpp only (this is "
                        f"--engine {engine}); drop it")
    if engine == "llamacpp":
        if _given(NOT_LLAMACPP):
            raise UserError(f"{', '.join(_given(NOT_LLAMACPP))}: not read by --engine llamacpp (llama.cpp decodes "
                            "the drafter itself, on this CPU); drop them")
        if target is None:
            raise UserError("--engine llamacpp needs --target (checkpoint folder or fetched asset)")
        from trtllm_spec.stages.llamacpp import run_measure_llamacpp

        profile = run_measure_llamacpp(target, drafter, draft_len, out=out, force=force,
                                       compare_reference=compare_reference, suite=suite,
                                       categories=_categories(categories), num_prompts=num_prompts,
                                       max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                       dtype=dtype, device=device, chat_template=chat_template,
                                       training_data=training_data, allow_overlap=allow_overlap,
                                       allow_long=allow_long, progress=_log, request_mode=request_mode)
        _summary(profile, out, as_json)
        _comparison(profile, as_json)
        return
    if _given(SERVED_ONLY):
        raise UserError(f"{', '.join(_given(SERVED_ONLY))}: options of --engine openai (a served endpoint); add "
                        f"--engine openai or drop them (this is --engine {engine})")
    if bench_report is not None or metrics is not None:
        ctx = click.get_current_context()
        given = [f"--{n.replace('_', '-')}" for n in ctx.params if n not in ENGINE_REPORT_PARAMS
                 and ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise UserError(f"{', '.join(given)}: options of a measurement run here; with --from-trtllm-bench or "
                            "--from-trtllm-metrics the engine already measured: drop them (allowed: --bundle, "
                            "--draft-len, --temperature)")
        profile = run_engine_report(bench_report=bench_report, metrics=metrics, bundle=bundle, draft_len=draft_len,
                                    temperature=temperature, out=out, force=force)
        _summary(profile, out, as_json)
        return
    if target is None:
        raise UserError("measure needs --target (checkpoint folder or fetched asset), or --from-trtllm-bench / "
                        "--from-trtllm-metrics to read the engine's own numbers")
    from trtllm_spec.stages.measure import cli_drafter_options

    options = cli_drafter_options(drafter, max_matching_ngram_size=max_matching_ngram_size, global_pool=global_pool,
                                  global_pool_size=global_pool_size, sa_enhancer_threshold=sa_enhancer_threshold)
    profile = run_measure(target, drafter, draft_len, engine=engine, bundle=bundle, out=out, force=force,
                          drafter_options=options,
                          training_data=training_data, allow_overlap=allow_overlap, allow_long=allow_long,
                          block_sweep=parse_int_list(block_sweep, "--block-sweep"), suite=suite,
                          categories=_categories(categories), num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                          temperature=temperature, seed=seed, dtype=dtype, device=device,
                          reference_engine=reference_engine, chat_template=chat_template, progress=_log,
                          request_mode=request_mode)
    _summary(profile, out, as_json)
    problem = lossless_problem(profile)
    if problem:
        raise CheckFailed(problem)


def _served(target, server_url, server_model, concurrency, request_timeout, recipe_file, gpu, suite,
            training_data, allow_overlap, categories, num_prompts, max_new_tokens, temperature, seed, chat_template,
            out, force, as_json, allow_long=False, request_mode=None) -> None:
    from trtllm_spec.errors import UserError
    from trtllm_spec.report.served import render_table
    from trtllm_spec.stages.served import run_served

    if server_url is None:
        raise UserError("--engine openai needs --server-url http://HOST:PORT (the OpenAI-compatible server to "
                        "measure; 'trtllm-spec assets serve smollm2-135m --port 8000' starts one here)")
    if _given(NOT_SERVED):
        raise UserError(f"{', '.join(_given(NOT_SERVED))}: not read by --engine openai (the server decodes with "
                        "its own drafter and settings); drop them")
    data = run_served(server_url=server_url, server_model=server_model, concurrency=concurrency, target=target,
                      recipe_file=recipe_file, gpu=gpu, suite=suite, categories=_categories(categories),
                      num_prompts=num_prompts, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                      chat_template=chat_template, training_data=training_data, allow_overlap=allow_overlap,
                      timeout_s=request_timeout, out=out, force=force, progress=_log, allow_long=allow_long,
                      request_mode=request_mode)
    if as_json:
        echo_json(data)
    click.echo(render_table(data) + (f"\n->  {out}/report.md" if out else ""), err=as_json)


def _summary(profile: dict, out: Path | None, as_json: bool) -> None:
    if as_json:
        echo_json(profile)
    ov = profile["overall"]
    speed = f", speedup {ov['speedup']:.2f}x" if ov.get("speedup") else ""
    source = f" (from {profile['source']['kind']})" if "source" in profile else ""
    where = profile["settings"].get("placement") or {}
    click.echo(f"{profile['drafter']['type']} D={profile['drafter']['draft_len']}: mean AL "
               f"{ov['mean_acceptance_length']:.2f} over {ov['num_prompts']} prompts{speed}{source}"
               + (f" ({where['device']}, {where['dtype']})" if where else "")
               + (f"  ->  {out}/report.md" if out else ""), err=as_json)
    from trtllm_spec.measure.report import mode_lines

    click.echo("\n".join(line.removeprefix("- ") for line in mode_lines(profile)), err=as_json)


def _comparison(profile: dict, as_json: bool) -> None:
    c = profile.get("comparison")
    if not c:
        return
    o = c["overall"]
    click.echo(f"reference decoder on the same prompts: AL {o['acceptance_length_reference']:.3f}; llama.cpp "
               f"{o['acceptance_length_llamacpp']:.3f} ({o['relative_difference']:+.1%}, "
               f"{'within' if c['within_tolerance'] else 'outside'} {c['tolerance']:.0%}); llama.cpp output = its "
               f"target-only greedy on {o['identical_to_llamacpp_target_greedy']}/{o['num_prompts']}, = ours on "
               f"{o['identical_to_reference_target_greedy']}/{o['num_prompts']}", err=as_json)
