"""A hand-made bundle sealed like ``trtllm-spec build`` seals one: a resolved recipe and a manifest recording the
release profile and drafter the recipe resolves to, and the sha256 of every file (``core.bundle.read_bundle``
refuses anything less). For tests that need a bundle's options without building one."""

from __future__ import annotations

from pathlib import Path

import yaml


def seal_bundle(bundle: Path, drafter: str = "eagle3", version: str = "auto", *, profile: str | None = None,
                recipe: dict | None = None, hf_id: str = "meta-llama/Llama-3.1-8B-Instruct",
                served: str | None = None, **manifest) -> Path:
    """Write ``recipe.resolved.yaml`` (``drafter``, ``engine.trtllm_version: version``) and ``manifest.json``
    into ``bundle``; ``profile`` overrides the release the manifest records (a manifest that disagrees)."""
    from trtllm_spec.core.recipe_load import recipe_from_dict, recipe_to_dict
    from trtllm_spec.deploy.manifest import write_manifest

    data = recipe or {"name": "sealed", "target": {"model": "llama-3.1-8b-instruct"}, "drafter": {"type": drafter},
                      "hardware": {"gpu": "h100"}, "engine": {"trtllm_version": version}}
    r = recipe_from_dict(data)
    (bundle / "recipe.resolved.yaml").write_text(yaml.safe_dump(recipe_to_dict(r), sort_keys=False))
    write_manifest(bundle, {"recipe": recipe_to_dict(r), "target": {"spec": r.target.model, "hf_id": hf_id,
                                                                    "served": served or hf_id},
                            "drafter": {"type": r.drafter.type}, "trtllm_profile": profile or r.trtllm_profile,
                            **manifest})
    return bundle


BENCH_REPORT = Path(__file__).resolve().parent / "fixtures" / "engine_reports" / "fake_bench_report_c1.json"


def bench_report_for(path: Path, draft_len: int, mode: str | None = None) -> Path:
    """A FAKE trtllm-bench report (``fixtures/engine_reports/fake_bench_report_c1.json``) at one concurrent request,
    whose drafted tokens are ``draft_len`` per iteration (what a bundle built at that D would report), in decoding
    mode ``mode`` when given; written to ``path`` for ``replan --from-trtllm-bench``."""
    import json

    rep = json.loads(BENCH_REPORT.read_text())
    stats, info = rep["decoding_stats"], rep["request_info"]
    its = info["avg_output_length"] - stats["num_accepted_draft_tokens_percentiles"]["average"]
    stats["num_draft_tokens_percentiles"]["average"] = draft_len * its
    if mode is not None:
        stats["mode"] = mode
    info["avg_num_concurrent_requests"] = 1.0
    path.write_text(json.dumps(rep))
    return path
