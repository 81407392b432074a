"""``trtllm-spec measure``: acceptance of a drafter on real prompts -> speculation_profile.json + report."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main, parse_int_list


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _categories(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", "").split(",") if c]


def _input_files(target: Path | None, drafter: str | None) -> list[Path]:
    files: list[Path] = []
    for folder in (target, Path(drafter) if drafter and drafter != "ngram" else None):
        if folder is not None and folder.is_dir():
            files += sorted(p for p in folder.iterdir() if p.suffix in (".json", ".safetensors", ".jinja"))
    return files


ENGINE_REPORT_PARAMS = ("bench_report", "metrics", "bundle", "draft_len", "temperature", "out", "force", "as_json")


def _write(profile: dict, out: Path | None, force: bool, as_json: bool, args: dict, files: list[Path],
           inputs: tuple[Path, ...]) -> None:
    """Write the profile (atomically), print it with --json, and say where it went."""
    from trtllm_spec.core.files import atomic_dir
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.measure import write_measure_outputs

    if out is not None:
        prov = provenance(args, files, {"settings": profile["settings"], "suite": profile["suite"],
                                        **({"source": profile["source"]} if "source" in profile else {})})
        with atomic_dir(out, force=force, inputs=inputs) as tmp:
            write_measure_outputs(profile, tmp, prov)
    if as_json:
        echo_json(profile)
    ov = profile["overall"]
    speed = f", speedup {ov['speedup']:.2f}x" if ov.get("speedup") else ""
    source = f" (from {profile['source']['kind']})" if "source" in profile else ""
    click.echo(f"{profile['drafter']['type']} D={profile['drafter']['draft_len']}: mean AL "
               f"{ov['mean_acceptance_length']:.2f} over {ov['num_prompts']} prompts{speed}{source}"
               + (f"  ->  {out}/report.md" if out else ""), err=as_json)


@main.command("measure")
@click.option("--target", help="Target HF checkpoint folder or fetched asset (e.g. smollm2-135m); required except "
              "with --from-trtllm-bench / --from-trtllm-metrics.")
@click.option("--drafter", help="Exported drafter folder (EAGLE-3, EAGLE-1/MTP head, DFlash/DSpark), a draft model "
              "folder, or 'ngram'. With --engine trtllm the bundle's drafter is used.")
@click.option("--draft-len", type=int, help="D: drafts per target iteration (required with --engine pytorch).")
@click.option("--suite", default="speed-lite", show_default=True, metavar="speed-lite|FILE|DIR",
              help="Prompt suite: the built-in speed-lite, or your own JSONL file (or a folder of them, one per "
              "category): OpenAI 'messages', 'prompt' or ShareGPT 'conversations' per line, optional 'category'.")
@click.option("--training-data", type=click.Path(path_type=Path),
              help="With your own --suite: the drafter's training conversations (JSONL); suite prompts found there "
              "are refused (the packaged train pools are always checked).")
@click.option("--allow-overlap", is_flag=True, help="Measure suite prompts that are also training prompts, with a "
              "warning giving their count.")
@click.option("--categories", help="Comma-separated suite categories (default: all).")
@click.option("--num-prompts", type=int, default=10, show_default=True, help="Prompts per category.")
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 = greedy (outputs compared).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="Precision of the PyTorch reference run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Suite selection and sampling seed.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the reference decoder runs (auto: CUDA when torch sees a GPU).")
@click.option("--chat-template", type=click.Path(path_type=Path), help="Jinja chat template, if the checkpoint lacks one.")
@click.option("--block-sweep", help="DFlash/DSpark: also measure these draft lengths, e.g. 1,2,4 (one run each).")
@click.option("--engine", type=click.Choice(["pytorch", "trtllm"]), default="pytorch", show_default=True,
              help="pytorch: the reference decoder here; trtllm: TensorRT-LLM's LLM API on a GPU node.")
@click.option("--bundle", type=click.Path(path_type=Path), help="With --engine trtllm: a 'trtllm-spec build' folder "
              "(its llm_api_options.yaml).")
@click.option("--from-trtllm-bench", "bench_report", type=click.Path(path_type=Path),
              help="Read a trtllm-bench --report_json file (the bundle's bench.sh writes them) instead of measuring.")
@click.option("--from-trtllm-metrics", "metrics", metavar="FILE|URL",
              help="Read trtllm-serve iteration stats (a saved /metrics JSON, or http://HOST:PORT/metrics) instead "
              "of measuring; needs enable_iter_perf_stats (the bundle's options set it).")
@click.option("--out", type=click.Path(path_type=Path), help="Write speculation_profile.json, report.md, plots here.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--json", "as_json", is_flag=True, help="Print speculation_profile.json to stdout.")
def measure_cmd(target: str, drafter: str | None, draft_len: int | None, suite: str, training_data: Path | None,
                allow_overlap: bool, categories: str | None,
                num_prompts: int, max_new_tokens: int, temperature: float, dtype: str, seed: int, device: str,
                chat_template: Path | None, block_sweep: str | None, engine: str, bundle: Path | None,
                bench_report: Path | None, metrics: str | None, out: Path | None, force: bool, as_json: bool) -> None:
    """Measure acceptance length (overall, per category, per draft position) and speedup of a drafter against
    its target on the speed-lite suite; the profile feeds 'trtllm-spec plan --acceptance'.

    Example: trtllm-spec measure --target smollm2-135m --drafter ngram --draft-len 4 --categories coding,math
    --num-prompts 2 --out measure/
    """
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.errors import CheckFailed, UserError

    if out is None and not as_json:
        raise UserError("measure needs --out DIR (files) or --json (stdout), or both")
    if bench_report is not None or metrics is not None:
        ctx = click.get_current_context()
        given = [f"--{n.replace('_', '-')}" for n in ctx.params if n not in ENGINE_REPORT_PARAMS
                 and ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise UserError(f"{', '.join(given)}: options of a measurement run here; with --from-trtllm-bench or "
                            "--from-trtllm-metrics the engine already measured: drop them (allowed: --bundle, "
                            "--draft-len, --temperature)")
        from trtllm_spec.measure.engine_reports import profile_from_engine

        profile, files = profile_from_engine(bench_report=bench_report, metrics=metrics, bundle=bundle,
                                             draft_len=draft_len, temperature=temperature)
        _write(profile, out, force, as_json, {"measure": {"from_trtllm_bench": str(bench_report) if bench_report
                                                          else None, "from_trtllm_metrics": metrics,
                                                          "bundle": str(bundle) if bundle else None,
                                                          "draft_len": draft_len, "temperature": temperature}},
               files, ())
        return
    if target is None:
        raise UserError("measure needs --target (checkpoint folder or fetched asset), or --from-trtllm-bench / "
                        "--from-trtllm-metrics to read the engine's own numbers")
    sweep = parse_int_list(block_sweep, "--block-sweep")
    cats = _categories(categories)
    if engine == "pytorch":
        if bundle is not None:
            raise UserError("--bundle is read by --engine trtllm only; drop it or add --engine trtllm")
        if drafter is None or draft_len is None:
            raise UserError("--engine pytorch needs --drafter (folder or 'ngram') and --draft-len D")
    elif bundle is None:
        raise UserError("--engine trtllm needs --bundle DIR (a 'trtllm-spec build' folder with llm_api_options.yaml)")
    elif drafter is not None or sweep:
        raise UserError("--engine trtllm measures the bundle's drafter at its max_draft_len; drop --drafter and "
                        "--block-sweep")
    inputs = tuple(Path(p) for p in (target, drafter) if p and p != "ngram" and Path(p).is_dir())
    if out is not None:
        check_output_dir(out, force, inputs)  # fail before minutes of decoding, not after
    from trtllm_spec.data.user_suite import suite_checker

    common = dict(suite=suite, categories=cats, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                  temperature=temperature, seed=seed, chat_template=chat_template, progress=_log,
                  suite_check=suite_checker(suite, training_data, allow_overlap, _log))
    if engine == "pytorch":
        from trtllm_spec.measure.run import measure

        profile = measure(target, drafter, draft_len, dtype=dtype, block_sweep=sweep, device=device, **common)
    else:
        from trtllm_spec.measure.trtllm_engine import measure_trtllm

        profile = measure_trtllm(target, bundle, draft_len, out=str(out) if out else None, **common)
    args = {"target": target, "drafter": drafter, "draft_len": draft_len, "engine": engine,
            "bundle": str(bundle) if bundle else None, "suite": suite, "categories": cats,
            "training_data": str(training_data) if training_data else None, "allow_overlap": allow_overlap,
            "num_prompts": num_prompts, "max_new_tokens": max_new_tokens, "temperature": temperature,
            "dtype": dtype, "seed": seed, "device": device,
            "chat_template": str(chat_template) if chat_template else None, "block_sweep": sweep}
    target_path = Path(profile["target"]["path"])
    _write(profile, out, force, as_json, {"measure": args}, _input_files(target_path, drafter), inputs)
    from trtllm_spec.measure.report import lossless_problem

    problem = lossless_problem(profile)
    if problem:
        raise CheckFailed(problem)
