"""``trtllm-spec tune``: the co-design loop on a real engine (stages/tune.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main
from trtllm_spec.core.suites import SUITE_NAME

# the options that only one engine reads: given for another, they are refused by name
ONLY = {"vllm": ("drafter", "max_servers", "kv_cache_gib", "max_model_len", "serve_schedule"),
        "openai": ("servers",), "trtllm": ("bundle",)}
FLAG = {"drafter": "--drafter", "max_servers": "--max-servers", "kv_cache_gib": "--kv-cache-gib",
        "max_model_len": "--max-model-len", "serve_schedule": "--serve-schedule/--no-serve-schedule",
        "servers": "--server", "bundle": "--bundle"}


def _log(msg: str) -> None:
    click.echo(msg, err=True)


@main.command("tune")
@click.option("--engine", type=click.Choice(("vllm", "openai", "trtllm")), default="vllm", show_default=True,
              help="vllm: vLLM servers started here (127.0.0.1), one per D; openai: your OpenAI-compatible servers, "
                   "one per D (--server); trtllm: a bundle's bench scripts on a GPU node (deferred here).")
@click.option("--target", help="The target checkpoint folder or fetched asset (e.g. smollm2-135m).")
@click.option("--drafter", help="vllm: 'ngram', or a drafter folder (an exported EAGLE-3 / DFlash head, or a draft "
                                "model checkpoint).")
@click.option("--drafter-type", help="The mechanism the servers run (default: read from --drafter's folder; "
                                     "required with --engine openai).")
@click.option("--server", "servers", multiple=True, metavar="D=URL",
              help="openai: the server that runs D (0 = the target alone; 'schedule' = one serving the schedule), "
                   "repeated for every D of the grid.")
@click.option("--bundle", type=click.Path(path_type=Path), help="trtllm: the 'trtllm-spec build' folder.")
@click.option("--concurrency", default="1,2,4,8,16", show_default=True, help="The grid's concurrencies (>= 2).")
@click.option("--draft-lens", default="0-5", show_default=True, help="The grid's D: a range or a list, 0 included.")
@click.option("--calibration-cells", default="auto", show_default=True,
              help="CONCURRENCY:D pairs the fit uses, or auto: the smallest and a high concurrency x D = 0, 1 and "
                   "the largest.")
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Interleaved rounds per cell (3 or more to drop and re-run a disturbed round).")
@click.option("--verify", type=click.Choice(("picks", "all", "none")), default="picks", show_default=True,
              help="After the fit, measure the picked D at each concurrency (picks), every cell of the grid (all), "
                   "or none; the schedule is served in every case but none.")
@click.option("--serve-schedule/--no-serve-schedule", default=True, show_default=True,
              help="vllm: serve the picked schedule (num_speculative_tokens_per_batch_size) and measure it.")
@click.option("--suite", default=SUITE_NAME, show_default=True, help=f"{SUITE_NAME}, or a prompt file/folder.")
@click.option("--categories", help="Comma-separated categories of the suite.")
@click.option("--num-prompts", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Prompts per category (every cell sends the same ones).")
@click.option("--max-tokens", type=click.IntRange(8, 4096), default=48, show_default=True,
              help="Tokens generated per request.")
@click.option("--margin", default="auto", show_default=True,
              help="The pick margin (a fraction, at most 0.05), or auto: from the measured noise.")
@click.option("--max-servers", type=click.IntRange(2, 16), default=4, show_default=True,
              help="vllm: servers up at once, the plain one included (~3.5 GiB each).")
@click.option("--kv-cache-gib", type=click.IntRange(1, 64), default=1, show_default=True, help="vllm: KV cache per server.")
@click.option("--max-model-len", type=click.IntRange(256, 131072), default=2048, show_default=True,
              help="vllm: context length per server.")
@click.option("--time-budget", "time_budget", type=float, metavar="MINUTES",
              help="Refuse to start when the estimate exceeds it.")
@click.option("--request-timeout", type=click.FloatRange(1.0), default=900.0, show_default=True,
              help="Seconds one streamed request may take.")
@click.option("--out", type=click.Path(path_type=Path), help="The output folder (its runs resume from "
                                                              "'.NAME.tune-work' beside it).")
@click.option("--force", is_flag=True, help="Start again: discard the kept runs and replace --out.")
@click.option("--dry-run", is_flag=True, help="Print the design and the budget; measure nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print tune.json to stdout.")
@click.pass_context
def tune_cmd(ctx: click.Context, engine: str, target: str | None, drafter: str | None, drafter_type: str | None,
             servers: tuple[str, ...], bundle: Path | None, concurrency: str, draft_lens: str,
             calibration_cells: str, rounds: int, verify: str, serve_schedule: bool, suite: str,
             categories: str | None, num_prompts: int, max_tokens: int, margin: str, max_servers: int,
             kv_cache_gib: int, max_model_len: int, time_budget: float | None, request_timeout: float,
             out: Path | None, force: bool, dry_run: bool, as_json: bool) -> None:
    """Measure the engine at a few cells, fit the step model, predict every concurrency x D with intervals, pick D
    per concurrency, write the schedule in the engine's form and serve it beside a few verification cells.

    Example: trtllm-spec tune --engine vllm --target smollm2-135m --drafter ngram --concurrency 1,2,4,8,16
    --draft-lens 0-5 --out tune/
    """
    from trtllm_spec.errors import UserError

    given = {n for n in ONLY["vllm"] + ONLY["openai"] + ONLY["trtllm"]
             if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE}
    wrong = sorted(given - set(ONLY[engine]))
    if wrong:
        owner = {n: e for e, ns in ONLY.items() for n in ns}
        raise UserError(f"{', '.join(FLAG[n] for n in wrong)}: only --engine {owner[wrong[0]]} reads "
                        f"{'it' if len(wrong) == 1 else 'them'}; drop {'it' if len(wrong) == 1 else 'them'} with "
                        f"--engine {engine}")
    if engine == "trtllm":
        _deferred(bundle, as_json)
        return
    settings = _settings(engine, target, drafter, drafter_type, servers, concurrency, draft_lens, calibration_cells,
                         rounds, verify, serve_schedule, suite, categories, num_prompts, max_tokens, margin,
                         max_servers, kv_cache_gib, max_model_len, time_budget, request_timeout)
    if out is None and not dry_run:
        raise UserError("tune needs --out DIR (or --dry-run to print the design and budget only)")
    from trtllm_spec.stages.tune import run_tune

    result = run_tune(settings, out or Path("tune"), force=force, dry_run=dry_run, log=_log)
    if as_json:
        echo_json(result)
    if dry_run:
        return
    picks = ", ".join(f"c={c}: D {d}" for c, d in result["picks"].items())
    held = result["held_out"]
    click.echo(f"D per concurrency: {picks}; held-out median |error| "
               + (f"{held['median_abs_error_server']:.1%} (server), {held['median_abs_error_tpot']:.1%} (TPOT)"
                  if held["median_abs_error_server"] is not None else "- (no held-out cell measured)")
               + f"  ->  {out}/tune.md", err=as_json)


def _deferred(bundle: Path | None, as_json: bool) -> None:
    """TensorRT-LLM runs on a GPU node: the bundle's scripts measure the same cells there and replan.sh fits them."""
    from trtllm_spec.errors import UserError

    if bundle is None:
        raise UserError("--engine trtllm needs --bundle DIR (a 'trtllm-spec build' folder): its bench scripts run the "
                        "calibration cells on the GPU node")
    if not (bundle / "replan.sh").is_file():
        raise UserError(f"--bundle {bundle}: no replan.sh; give a 'trtllm-spec build' folder (rebuild it with this "
                        "trtllm-spec)")
    cmds = [f"bash {bundle}/{s}" for s in ("bench_plain.sh", "bench.sh", "bench_calibrate.sh", "replan.sh")
            if (bundle / s).is_file()]
    text = ("deferred: TensorRT-LLM cannot run here; on a GPU node with the bundle's release: " + " && ".join(cmds)
            + " (plain and speculative runs at two concurrencies, fitted by replan --calibrate with the same step "
            "terms as tune; the new options and schedule land in replan/)")
    if as_json:
        echo_json({"deferred": True, "commands": cmds})
    click.echo(text, err=as_json)


def _settings(engine, target, drafter, drafter_type, servers, concurrency, draft_lens, calibration_cells, rounds,
              verify, serve_schedule, suite, categories, num_prompts, max_tokens, margin, max_servers, kv_cache_gib,
              max_model_len, time_budget, request_timeout):
    from trtllm_spec.errors import UserError
    from trtllm_spec.measure.served import parse_concurrency
    from trtllm_spec.stages.tune import TuneSettings, choose_calibration, parse_cells, parse_draft_lens

    if not target:
        raise UserError("tune needs --target (the checkpoint folder or fetched asset the engine serves)")
    cs = tuple(sorted(parse_concurrency(concurrency)))
    ds = parse_draft_lens(draft_lens)
    cal = choose_calibration(cs, ds) if calibration_cells.strip() == "auto" else parse_cells(calibration_cells)
    urls: dict[str, str] = {}
    if engine == "openai":
        for item in servers:
            key, sep, url = item.partition("=")
            key = key.strip()
            if not sep or not (key.isdigit() or key == "schedule") or not url.startswith(("http://", "https://")):
                raise UserError(f"--server {item!r}: give D=URL (D a draft length or 'schedule'), e.g. "
                                "--server 0=http://127.0.0.1:8000")
            if key in urls:
                raise UserError(f"--server {key}= is given twice; give one server per D")
            urls[str(int(key)) if key.isdigit() else key] = url.rstrip("/")
        missing = [d for d in ds if str(d) not in urls]
        if missing:
            raise UserError(f"--engine openai: no --server for D = {', '.join(map(str, missing))}; start one server per "
                            "D of --draft-lens (0: the target alone) and give each as --server D=URL, or drop those D")
        extra = [k for k in urls if k != "schedule" and int(k) not in ds]
        if extra:
            raise UserError(f"--server {extra[0]}=: D = {extra[0]} is not in --draft-lens {draft_lens}")
        if not drafter_type:
            raise UserError("--engine openai needs --drafter-type (the mechanism your servers run, e.g. eagle3)")
    else:
        from trtllm_spec.drafters.registry import folderless

        if not drafter:
            raise UserError(f"--engine vllm needs --drafter: {' or '.join(map(repr, folderless()))}, or a drafter "
                            "folder")
        if drafter not in folderless() and not Path(drafter).is_dir():
            raise UserError(f"--drafter {drafter!r} is neither {' nor '.join(map(repr, folderless()))} nor an "
                            "existing folder")
    from trtllm_spec.drafters.registry import MECHANISMS, folderless

    if drafter_type is None:
        if drafter in folderless():
            drafter_type = drafter
        else:
            from trtllm_spec.drafters.load import folder_kind

            drafter_type = folder_kind(Path(drafter))
    if drafter_type not in MECHANISMS:
        raise UserError(f"--drafter-type {drafter_type!r}: valid: {', '.join(MECHANISMS)}")
    m: float | None = None
    if margin.strip() != "auto":
        try:
            m = float(margin)
        except ValueError:
            raise UserError(f"--margin {margin!r}: give a fraction such as 0.03, or auto") from None
        if not 0.0 <= m <= 0.05:
            raise UserError(f"--margin {m}: a pick margin is a fraction in [0, 0.05] (a D within 5% of the best is "
                            "called right; wider would call a loss right), or auto")
    if time_budget is not None and time_budget <= 0:
        raise UserError(f"--time-budget {time_budget}: give the minutes tune may take, > 0")
    if rounds < 3:
        _log(f"tune: --rounds {rounds}: with fewer than 3 rounds a disturbed round cannot be told from the others "
             "(none is dropped)")
    return TuneSettings(engine=engine, target=target, drafter=drafter, drafter_type=drafter_type, servers=urls,
                        concurrency=cs, draft_lens=ds, calibration=cal, rounds=rounds, verify=verify,
                        serve_schedule=serve_schedule, suite=suite,
                        categories=tuple(c.strip() for c in categories.split(",") if c.strip()) if categories else None,
                        num_prompts=num_prompts, max_tokens=max_tokens, margin=m, max_servers=max_servers,
                        kv_cache_gib=kv_cache_gib, max_model_len=max_model_len, time_budget_min=time_budget,
                        request_timeout_s=request_timeout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
