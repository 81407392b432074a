"""Acceptance measurement on real prompts: the speculation profile, its report and plots.

``measure`` (PyTorch reference decoder) and ``measure_trtllm`` (TensorRT-LLM, on a GPU node) return a
``speculation_profile.json`` dict; ``write_measure_outputs`` writes it with report.md and the plots.
Heavy imports (torch, transformers, tensorrt_llm) happen inside the functions.
"""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.measure.profile import SCHEMA, profile_problems, validate_profile


def measure(*args, **kwargs) -> dict:
    from trtllm_spec.measure.run import measure as _measure

    return _measure(*args, **kwargs)


def measure_trtllm(*args, **kwargs) -> dict:
    from trtllm_spec.measure.trtllm_engine import measure_trtllm as _measure_trtllm

    return _measure_trtllm(*args, **kwargs)


def write_measure_outputs(profile: dict, folder: Path, provenance: dict | None = None) -> list[Path]:
    """speculation_profile.json, report.md, the PNGs (and provenance.json) into ``folder``."""
    from trtllm_spec.core.files import write_json_atomic, write_text_atomic
    from trtllm_spec.measure.report import render_markdown, write_plots

    validate_profile(profile)
    write_json_atomic(folder / "speculation_profile.json", profile)
    report = render_markdown(profile)
    if profile.get("comparison"):  # engine llamacpp: the reference decoder on the same prompts
        from trtllm_spec.measure.engine_compare import render_comparison

        report += render_comparison(profile["comparison"])
    write_text_atomic(folder / "report.md", report)
    paths = [folder / "speculation_profile.json", folder / "report.md", *write_plots(profile, folder)]
    if provenance is not None:
        write_json_atomic(folder / "provenance.json", provenance)
        paths.append(folder / "provenance.json")
    return paths


__all__ = ["SCHEMA", "measure", "measure_trtllm", "profile_problems", "validate_profile", "write_measure_outputs"]
