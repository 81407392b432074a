"""Two engines on the same prompts: llama.cpp's speculative decoding beside our reference decoder.

Per category and overall: AL at D of each, their difference and relative difference (llama.cpp / ours - 1);
whether llama.cpp's speculative output equals target-only greedy (llama.cpp's own, i.e. its decoding is
lossless; and our reference decoder's, i.e. the two engines compute the same target); and the prompts whose
outputs differ between engines (AL is only comparable prompt by prompt where the texts agree, since a different
continuation drafts different contexts). ``TOLERANCE`` is the issue's agreement bar.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

TOLERANCE = 0.05  # llama.cpp's AL within 5% of ours on the same prompts
TOLERANCES = {"llamacpp": TOLERANCE, "vllm": 0.03}  # vLLM: issue 43's bar, 3% per mechanism
TITLES = {"llamacpp": "llama.cpp", "vllm": "vLLM"}


def _al(runs) -> float:
    its = sum(len(r.accepted) for r in runs)
    return (sum(sum(r.accepted) for r in runs) + its) / its if its else 1.0


def _row(ll: Sequence, ours: Sequence, engine: str = "llamacpp") -> dict:
    a, b = _al(ll), _al(ours)
    return {"num_prompts": len(ll), f"acceptance_length_{engine}": round(a, 6),
            "acceptance_length_reference": round(b, 6),
            "difference": round(a - b, 6), "relative_difference": round(a / b - 1, 6) if b else None,
            f"identical_to_{engine}_target_greedy": sum(r.output == r.reference for r in ll),
            "identical_to_reference_target_greedy": sum(x.output == y.reference for x, y in zip(ll, ours,
                                                                                                strict=True)),
            "same_output_both_engines": sum(x.output == y.output for x, y in zip(ll, ours, strict=True))}


def compare(llama_runs: Sequence, ref_runs: Sequence, draft_len: int, reference: dict, engine: str = "llamacpp",
            tolerance: float | None = None) -> dict:
    """The comparison record (profile key ``comparison``). Both run lists hold the same prompts in order;
    ``engine`` names the other engine in the keys (``acceptance_length_<engine>``); ``tolerance`` its bar
    (``TOLERANCES``)."""
    tol = TOLERANCES.get(engine, TOLERANCE) if tolerance is None else tolerance
    ids = [r.id for r in llama_runs]
    if ids != [r.id for r in ref_runs]:
        raise ValueError("the two engines measured different prompts")
    cats: dict[str, list[int]] = {}
    for i, r in enumerate(llama_runs):
        cats.setdefault(r.category, []).append(i)
    overall = _row(llama_runs, ref_runs, engine)
    rel = overall["relative_difference"]
    return {
        "engine": engine, "reference_engine": "pytorch", "draft_len": draft_len, "tolerance": tol,
        "within_tolerance": rel is not None and abs(rel) <= tol,
        "reference": reference,
        "overall": overall,
        "categories": {c: _row([llama_runs[i] for i in idx], [ref_runs[i] for i in idx], engine)
                       for c, idx in cats.items()},
        "prompts": [{"id": x.id, "category": x.category, f"acceptance_length_{engine}": round(_al([x]), 4),
                     "acceptance_length_reference": round(_al([y]), 4),
                     f"identical_to_{engine}_target_greedy": x.output == x.reference,
                     "identical_to_reference_target_greedy": x.output == y.reference,
                     "same_output_both_engines": x.output == y.output}
                    for x, y in zip(llama_runs, ref_runs, strict=True)],
    }


def render_comparison(c: dict) -> str:
    """The comparison as a markdown section (appended to report.md)."""
    o = c["overall"]
    e = c.get("engine", "llamacpp")
    t = TITLES.get(e, e)
    lines = ["", f"## {t} vs the reference decoder (same prompts, greedy)", "",
             f"AL at D={c['draft_len']}: {t} {o[f'acceptance_length_{e}']:.3f}, reference decoder "
             f"{o['acceptance_length_reference']:.3f} ({o['relative_difference']:+.1%}; "
             f"{'within' if c['within_tolerance'] else 'OUTSIDE'} the {c['tolerance']:.0%} bar).", "",
             f"| category | prompts | AL {t} | AL ours | difference | relative | = {t} greedy | "
             "= our greedy | same output |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in [*sorted(c["categories"].items()), ("overall", o)]:
        lines.append(f"| {name} | {r['num_prompts']} | {r[f'acceptance_length_{e}']:.3f} | "
                     f"{r['acceptance_length_reference']:.3f} | {r['difference']:+.3f} | "
                     f"{r['relative_difference']:+.1%} | {r[f'identical_to_{e}_target_greedy']}/{r['num_prompts']} | "
                     f"{r['identical_to_reference_target_greedy']}/{r['num_prompts']} | "
                     f"{r['same_output_both_engines']}/{r['num_prompts']} |")
    lines += ["", f"'= {t} greedy': {t}'s speculative output equals its own target-only greedy output "
              "(lossless); '= our greedy': it equals our reference decoder's target-only greedy output (both engines "
              "compute the same target); AL is comparable prompt by prompt where the outputs agree.", ""]
    return "\n".join(lines)


def engine_profile(runs: Sequence, *, engine: str, engine_label: str, drafter: dict, draft_len: int, target: dict,
                   items: Sequence, suite_prov: dict, overlap: dict | None, seed: int, num_prompts: int, dtype: str,
                   temperature: float, max_new_tokens: int, chat_template, mode, settings: dict,
                   threads: int | None = None) -> dict:
    """The speculation profile of another engine's runs (``engine``: llamacpp, vllm), the same suite and settings
    record as the reference decoder's; ``engine_label`` stands where torch's version would (``llama.cpp <commit>``),
    ``settings`` adds the engine's own keys."""
    from trtllm_spec.measure.profile import build_profile

    machine = {"platform": platform.platform(terse=True), "machine": platform.machine(),
               "processor": platform.processor() or None, "cpu_count": os.cpu_count(), "torch": f"- ({engine_label})",
               **({"torch_threads": threads} if threads is not None else {}), "device": "cpu"}
    return build_profile(
        runs, engine=engine, drafter={**drafter, "draft_len": draft_len}, target=target,
        suite={**suite_prov, "seed": seed, "num_prompts_per_category": num_prompts,
               "item_ids": [it.id for it in items], **({"overlap": overlap} if overlap else {})},
        settings={"dtype": dtype, "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
                  "chat_template": str(chat_template) if chat_template else "checkpoint", "machine": machine,
                  **settings, "request_mode": mode.as_dict()})
