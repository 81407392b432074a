"""What ``trtllm-spec measure`` measures with: one row per source of numbers. ``cli/measure.py`` registers its
subcommands from this list (in its order, under its names) and renders its help from it; tests keep the two and
``SpeculationProfile.engine`` equal (``tests/unit/test_vllm.py``). Adding an engine (SGLang, trtllm-serve's own
launcher) is one row here, its server in ``serve/``, its stage in ``stages/<name>.py`` and its command function.

``profile_engine`` is the ``engine`` its speculation profile records (``core/artifacts.SpeculationProfile``), None
for a source that writes no profile of its own (``served``) or reads the engine's reports (``from-*``: their
profiles record the engine they came from); ``beside_reference``: it runs our reference decoder on the same prompts
and records ``comparison`` (``measure/engine_compare.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasureSource:
    name: str  # the subcommand
    summary: str  # its line in 'measure --help'
    profile_engine: str | None
    beside_reference: bool = False


SOURCES = (
    MeasureSource("reference", "our lossless reference decoder, here (CPU or GPU)", "pytorch"),
    MeasureSource("llamacpp", "llama.cpp's own speculative decoding, here, beside ours", "llamacpp", True),
    MeasureSource("vllm", "vLLM's own speculative decoding (a batching server), here, beside ours", "vllm", True),
    MeasureSource("served", "any running OpenAI-compatible server (TTFT, TPOT, tokens/s per concurrency)", None),
    MeasureSource("trtllm", "TensorRT-LLM's LLM API with a bundle's options (a GPU node)", "trtllm"),
    MeasureSource("from-bench", "a trtllm-bench --report_json file (the bundle's bench.sh writes them)", None),
    MeasureSource("from-metrics", "trtllm-serve iteration stats (a saved /metrics JSON or its URL)", None),
)
BY_NAME = {s.name: s for s in SOURCES}


def help_table(indent: str = "    ") -> str:
    """The subcommand list of 'measure --help' (click's no-rewrap block), its lines after the first indented as
    the docstring it is put in."""
    width = max(len(s.name) for s in SOURCES) + 2
    return "\b\n" + "\n".join(f"{indent}  {s.name.ljust(width)}{s.summary}" for s in SOURCES)
