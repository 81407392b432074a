"""``trtllm-spec replan``: a bundle's trtllm-bench report (or trtllm-serve stats) -> a new plan and options file."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import check_calibrate_args, echo_interval_change, echo_json, main


@main.command("replan")
@click.option("--bundle", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="A 'trtllm-spec build' folder (llm_api_options.yaml, recipe.resolved.yaml).")
@click.option("--from-trtllm-bench", "bench_report", type=click.Path(path_type=Path),
              help="A trtllm-bench --report_json file (bench.sh writes bench_results/report_c<N>.json).")
@click.option("--from-trtllm-metrics", "metrics", metavar="FILE|URL",
              help="trtllm-serve iteration stats: a saved /metrics JSON or http://HOST:PORT/metrics.")
@click.option("--draft-len", type=int, help="The D the engine ran, when a schedule lowered it at that concurrency.")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="The benchmark's sampling temperature.")
@click.option("--out", type=click.Path(path_type=Path), help="Where the re-plan goes (default: <bundle>/replan).")
@click.option("--force", is_flag=True, help="Replace an existing --out folder (never the bundle's own files).")
@click.option("--json", "as_json", is_flag=True, help="Print the new plan.json to stdout.")
@click.option("--calibrate", is_flag=True, help="Fit the host costs to the trtllm-bench REPORTS given after the "
              "options (a plain run, bench_plain.sh, a speculative run, bench.sh, and for a chain drafter the run at "
              "a second D, bench_calibrate.sh, which separates the per-draft-step term) first.")
@click.argument("reports", nargs=-1, type=click.Path(path_type=Path), metavar="[REPORT ...]")
def replan_cmd(bundle: Path, bench_report: Path | None, metrics: str | None, draft_len: int | None,
               temperature: float, out: Path | None, force: bool, as_json: bool, calibrate: bool,
               reports: tuple[Path, ...]) -> None:
    """Plan again with the acceptance TensorRT-LLM measured on this bundle; write the new options as a diff.

    Example (what the bundle's replan.sh runs): trtllm-spec replan --bundle . --from-trtllm-bench
    bench_results/report_c1.json
    """
    from trtllm_spec.stages.replan import replan

    check_calibrate_args("replan", reports, calibrate, "bench_results_plain/report_c1.json "
                         "bench_results_plain/report_c8.json bench_results/report_c1.json bench_results/report_c8.json "
                         "(bash bench_plain.sh, bash bench.sh: two concurrencies)")
    res = replan(bundle, bench_report=bench_report, metrics=metrics, draft_len=draft_len, out=out, force=force,
                 temperature=temperature, calibrate=list(reports) or None)
    if as_json:
        echo_json(res["plan"])
    rec, ov = res["plan"]["recommendation"], res["profile"]["overall"]
    sched = rec["draft_len_schedule"]
    click.echo(f"engine AL {ov['mean_acceptance_length']:.2f} at D={res['profile']['drafter']['draft_len']}: "
               f"max_draft_len {rec['max_draft_len']}" + (f", draft_len_schedule {sched}" if sched else "")
               + f"  ->  {res['out']}/replan.md, {res['out']}/llm_api_options.diff", err=as_json)
    if res["host_costs"] is not None:
        t = res["host_costs"].terms()
        click.echo(f"host costs fitted ({res['out']}/host_costs.json): "
                   + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in t.items()), err=as_json)
        echo_interval_change(res["plan"], as_json)
