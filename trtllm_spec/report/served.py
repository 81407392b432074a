"""The served-endpoint measurement (``measure served``) as a table: measured columns, then the planner's
prediction for the same batch sizes beside them, then the notes that say what each side is."""

from __future__ import annotations

MEASURED = ("conc", "reqs", "TTFT p50 ms", "TTFT p90 ms", "TPOT mean ms", "TPOT p50 ms", "TPOT p90 ms",
            "ITL p50 ms", "ITL p90 ms", "tok/s/user", "tok/s server", "tok/event", "server AL")
PREDICTED = ("pred D", "pred TPOT ms", "pred TPOT no-spec ms", "pred tok/s/user", "pred tok/s/gpu", "pred speedup")


def _f(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _acceptance(a: dict) -> str:
    if not a.get("reported"):
        return "not reported"
    if a.get("acceptance_length") is not None:
        return f"{a['acceptance_length']:.2f}"
    return f"rate {a['draft_acceptance_rate']:.2f}"


def _row(level: dict, pred: dict | None) -> list[str]:
    def stat(key: str, which: str) -> float | None:
        return (level.get(key) or {}).get(which)

    measured = [str(level["concurrency"]), str(level["requests"]), _f(stat("ttft_ms", "p50")),
                _f(stat("ttft_ms", "p90")), _f(stat("tpot_ms", "mean"), 2), _f(stat("tpot_ms", "p50"), 2),
                _f(stat("tpot_ms", "p90"), 2), _f(stat("itl_ms", "p50"), 2), _f(stat("itl_ms", "p90"), 2),
                _f(stat("tokens_per_s_per_user", "mean")), _f(level["tokens_per_s_server"]),
                _f(level["tokens_per_event"], 2), _acceptance(level["server_acceptance"])]
    if pred is None:
        return [*measured, "infeasible", *["-"] * (len(PREDICTED) - 1)]
    return [*measured, str(pred["draft_len"]), _f(pred["tpot_ms"], 3), _f(pred["tpot_no_spec_ms"], 3),
            _f(pred["tokens_per_s_per_user"]), _f(pred["tokens_per_s_per_gpu"]), _f(pred["speedup"], 2)]


def render_table(data: dict) -> str:
    """A plain-text table (stdout and report.md): one row per concurrency, measured | predicted."""
    preds = {r["batch_size"]: r for r in data["prediction"]["by_batch"]}
    rows = [list(MEASURED) + ["|"] + list(PREDICTED)]
    for level in data["levels"]:
        r = _row(level, preds.get(level["concurrency"]))
        rows.append(r[:len(MEASURED)] + ["|"] + r[len(MEASURED):])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    s, p = data["server"], data["prediction"]
    head = (f"{s['url']} (model {s['model']}): {data['suite']['items']} prompts of {data['suite']['name']}, "
            f"max_tokens {data['settings']['max_tokens']}, temperature {data['settings']['temperature']}")
    notes = [f"measured: streamed chat completions from this server; tokens counted from "
             f"{', '.join(sorted({lv['token_count_source'] for lv in data['levels']}))}",
             f"predicted: {p['label']}"]
    if s.get("unchecked"):
        notes.append(f"server: {s['unchecked']}")
    if s.get("serves"):
        runs = s["serves"]
        notes.append(f"server runs (as declared): {runs.get('drafter') or 'the target alone'}, D = "
                     f"{runs['draft_len']}; {runs.get('checked') or 'unchecked'}")
    notes += sorted({f"server acceptance: {lv['server_acceptance']['note']}" for lv in data["levels"]
                     if lv["server_acceptance"].get("note")})
    mode = (data.get("settings") or {}).get("request_mode")
    if mode:
        from trtllm_spec.core.request_mode import mode_from_dict

        notes.append(f"request mode: {mode_from_dict(mode).label()}")
    for lv in data["levels"]:
        pr = lv.get("per_request_acceptance") or {}
        if pr.get("reported"):
            cats = ", ".join(f"{c} {v['p10']:.2f}/{v['p50']:.2f}/{v['p90']:.2f}" for c, v in pr["categories"].items())
            notes.append(f"concurrency {lv['concurrency']}: per-request AL p10/p50/p90 {pr['overall']['p10']:.2f}/"
                         f"{pr['overall']['p50']:.2f}/{pr['overall']['p90']:.2f} ({pr['source']}); {cats}")
    return "\n".join([head, *lines, *notes])


def render_markdown(data: dict) -> str:
    return "\n".join(["# Served endpoint, measured", "", "```", render_table(data), "```", "",
                      "Columns: TTFT = time to the first streamed content; TPOT = (last - first content) / "
                      "(tokens - 1) per request; ITL = gaps between streamed events; tok/s/user = 1 / TPOT; "
                      "tok/s server = output tokens / wall time of the level; tok/event = tokens per streamed "
                      "event (one per iteration only where the server streams every iteration). Full numbers "
                      "(mean, p50, p90, p99; every request) are in served_measurement.json.", ""])
