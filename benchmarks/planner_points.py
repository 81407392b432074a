"""The published speculative-decoding points benchmarks/planner_validation.py compares the planner with.

Each ``Point`` is one source's sweep (speedup at (batch, D) pairs for one model, GPU, framework release and
acceptance). ``split`` is fixed before any fitting: "calibration" points may fit host costs, "validation"
(held-out) points never do; whole sources are held out. ``EXCLUDED`` lists published points looked at and not
priced, with the reason.

The split rule (stated in issue 36 for points added from then on, applied to every source since issue 44 item 5):
a source that reports its own numbers as a performance bug is held out, never fitted: its anomaly would become a
release's host cost (docs/planner.md, item 3). ``REPORTS_PERFORMANCE_BUG`` classifies every priced source, with the
source's own words; ``POINTS_AS_ASSIGNED`` is the split as each source was first placed (vLLM #20780's EAGLE-3
column and AngelSlim #163 went to calibration in i27 / j25, before the rule), ``POINTS`` the split after the rule
(``apply_split_rule``; each moved point says so in ``moved``). Why every source and not only new ones: the rule's
test is the source's own text, known before any fit and blind to the residuals, so applying it everywhere selects
nothing on the results, while a rule by date of entry would keep two fitted releases on exactly the anomaly the
rule exists to keep out (vLLM 0.9.2's per-draft-step term, which #20780's own EAGLE-1 column contradicts; SGLang
0.5's 4 ms per speculative iteration). Points never seen judge the choice, not these statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trtllm_spec.core.hardware import GB, TB, TFLOPS, Hardware
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.drafters.mtp.config import MTPDrafter
from trtllm_spec.planner.cost import Parallelism

# GeForce RTX 3090 (GA102 whitepaper: 71 TFLOP/s dense bf16/fp16 tensor with fp32 accumulate, 936 GB/s GDDR6X,
# 24 GB, 82 SMs; no NVLink needed at tp 1). Not in the catalogue: only the vLLM sweep of the EAGLE-3 paper uses it.
RTX3090 = Hardware(name="rtx3090", description="NVIDIA GeForce RTX 3090 24GB (GDDR6X)",
                   source="NVIDIA GA102 architecture whitepaper", peak_flops_per_s={"bf16": 71 * TFLOPS,
                                                                                    "fp16": 71 * TFLOPS},
                   mem_bytes_per_s=0.936 * TB, mem_bytes=24 * GB, sm_count=82)

@dataclass
class Point:
    """One published sweep: speedup measured at (batch, D) pairs for one model, GPU, framework and acceptance."""

    name: str
    source: str
    framework: str
    target: str
    gpu: str | Hardware
    drafter: object
    par: Parallelism
    num_gpus: int
    weights: str
    isl: int
    osl: int
    al: dict[int, float]  # AL per D as the source (or the named stand-in) measured it
    speedup: dict[tuple[int, int], float]  # (batch, D) -> measured speedup over the same framework without it
    split: str  # "calibration" or "validation", fixed before fitting
    release: str = ""  # the framework release (core/host_costs.PUBLISHED_HOST_PROFILES key) the source ran
    base_step_s: dict[int, float] = field(default_factory=dict)  # batch -> measured plain step (TPOT), if given
    notes: str = ""
    tree: tuple[int, int, int] | None = None  # SGLang EAGLE tree (steps, topk, num_draft_tokens); D = steps
    moved: str = ""  # set by apply_split_rule where the split rule moved the point from its assigned split

    @property
    def source_id(self) -> str:
        """The source without its details (the key of REPORTS_PERFORMANCE_BUG and of the per-source statistics)."""
        return self.source.split(" (")[0].split(":")[0]


E3_SGL = {2: 1.81, 4: 1.82, 8: 1.62, 16: 1.48, 24: 1.39, 32: 1.32, 48: 1.38, 56: 1.34, 64: 1.38}
E3_VLLM_3090 = {2: 1.75, 4: 1.68, 8: 1.58, 16: 1.49, 24: 1.42, 32: 1.36, 48: 1.21, 56: 1.01}
VLLM_20780_AL = {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}
EAGLE3_32K = Eagle3Drafter(draft_vocab_size=32000)
EAGLE1_FULL_VOCAB = Eagle3Drafter(draft_vocab_size=128256)  # EAGLE-1: one layer, drafts over the target's vocab
VLLM_20780_AL_E1 = {2: 2.1, 3: 2.29, 4: 2.39, 5: 2.43, 6: 2.45, 7: 2.47}

POINTS_AS_ASSIGNED = [
    Point("Llama-3.1-8B EAGLE-3 D=3, bs 2-64", "EAGLE-3 paper (arXiv 2503.01840v3) Table 3: SGLang v0.4.4, 1x H100, "
          "MT-bench, chain of 3", "SGLang", "llama-3.1-8b-instruct", "h100", EAGLE3_32K, Parallelism(), 1, "bf16",
          128, 512, {3: VLLM_20780_AL[3]}, {(b, 3): s for b, s in E3_SGL.items()}, "calibration", release="0.4.4",
          notes="AL(3) 2.79 from vllm #20780 (same target, MT-bench, EAGLE-3 head; SGLang's AL is not given)"),
    Point("Llama-3.1-8B EAGLE-3 K-sweep, bs1", "vllm-project/vllm issue #20780 (vLLM V1, MT-bench, TPOT)", "vLLM",
          "llama-3.1-8b-instruct", "h100", EAGLE3_32K, Parallelism(), 1, "bf16", 128, 512, VLLM_20780_AL,
          {(1, 2): 1.64, (1, 3): 1.73, (1, 4): 1.75, (1, 5): 1.71, (1, 6): 1.68, (1, 7): 1.65}, "calibration",
          release="0.9.2", base_step_s={1: 7.07e-3},
          notes="speedup = 7.07 ms / TPOT; GPU most likely H100; the issue is a bug report (EAGLE-3 only 1.01-1.21x "
                "faster than EAGLE-1 where AL is 1.12-1.43x higher): see the module docstring"),
    Point("DeepSeek-R1 MTP D-sweep, bs1", "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1 (table "
          "'Autoregressive MTP Layers'; FP4, 8x B200)", "TensorRT-LLM", "deepseek-v3", "b200", MTPDrafter(),
          Parallelism(tp=8, ep=2), 8, "nvfp4", 1024, 2048, {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01},
          {(1, 1): 1.78, (1, 2): 2.25, (1, 3): 2.28, (1, 4): 2.21, (1, 5): 2.15}, "calibration",
          release="0.20-1.0rc", base_step_s={1: 1 / 111}),
    Point("Llama-3.3-70B EAGLE-3, conc 4", "NVIDIA/TensorRT-LLM PR #5146 (H200 TP8, aa_gen_16k_1k)", "TensorRT-LLM",
          "llama-3.3-70b-instruct", "h200", EAGLE3_32K, Parallelism(tp=8), 8, "bf16", 16384, 1024, {3: 1.83},
          {(4, 3): 1.26}, "calibration", release="0.20-1.0rc", notes="speculative run with disable_overlap_scheduler: true"),
    Point("Qwen3-30B-A3B EAGLE-3 tree (4, 4, 16), bs 1-64", "Tencent/AngelSlim issue #163 (SGLang via SpecForge, "
          "4x H100 TP4, temperature 0)", "SGLang", "qwen3-30b-a3b", "h100", EAGLE3_32K, Parallelism(tp=4), 4, "bf16",
          128, 512, {4: 2.55}, {(1, 4): 185.64 / 218.89, (4, 4): 476.37 / 507.49, (8, 4): 673.14 / 677.14,
                                (32, 4): 927.11 / 1128.30, (64, 4): 1307.95 / 1237.84}, "calibration",
          release="0.5", base_step_s={b: b / t for b, t in zip((1, 4, 8, 32, 64), (218.89, 507.49, 677.14, 1128.30,
                                                                                      1237.84), strict=True)},
          tree=(4, 4, 16),
          notes="tree of 16 verified tokens per sequence (steps 4, topk 4); AL 2.54-2.58 by batch, 2.55 used; "
                "speedup = throughput ratio at the same batch; plain step = batch / plain throughput (issue 54: every "
                "batch, was bs 1 only); same reporter as SpecForge #339 (validation), another issue, TP and draft "
                "configuration"),
    # ---- validation: never used by --fit ----
    Point("Llama-3.1-8B EAGLE-3 D=2, bs 2-56", "EAGLE-3 paper (arXiv 2503.01840v3) Table 5: vLLM, 1x RTX 3090, "
          "MT-bench, chain of 2", "vLLM", "llama-3.1-8b-instruct", RTX3090, EAGLE3_32K, Parallelism(), 1, "bf16",
          128, 512, {2: VLLM_20780_AL[2]}, {(b, 2): s for b, s in E3_VLLM_3090.items()}, "validation",
          release="0.8.5", notes="AL(2) 2.36 from vllm #20780 (same target and benchmark); the paper (2025-03) "
          "names no vLLM version: priced with the 0.8.5 (2025-04) profile, the nearest measured release"),
    Point("Llama-4-Maverick EAGLE-3, conc 4", "NVIDIA/TensorRT-LLM PR #5146 (H200 TP8)", "TensorRT-LLM",
          "llama-4-maverick-17b-128e-instruct", "h200", EAGLE3_32K, Parallelism(tp=8), 8, "fp8", 16384, 1024,
          {3: 2.90}, {(4, 3): 1.67}, "validation", release="0.20-1.0rc"),
    Point("Qwen3-30B-A3B EAGLE-3 D=3, bs 1 and 4", "sgl-project/SpecForge issue #339 (SGLang, 2x H100 TP2, "
          "MT-bench)", "SGLang", "qwen3-30b-a3b", "h100", EAGLE3_32K, Parallelism(tp=2), 2, "bf16", 128, 512,
          {3: 1.86}, {(1, 3): 0.72, (4, 3): 0.79}, "validation", release="0.5", base_step_s={1: 1 / 222.47}),
    # ---- added on i27 (issue 27): one more source per framework where one was found ----
    Point("Llama-3.3-70B EAGLE-3 tree (8, 8, 64), bs1", "sgl-project/sglang PR #4716 (2025-03, H100 TP8, MT-bench "
          "80 questions, float16)", "SGLang", "llama-3.3-70b-instruct", "h100", EAGLE3_32K, Parallelism(tp=8), 8,
          "bf16", 128, 512, {8: 5.88}, {(1, 8): 234.54 / 88.61}, "validation", release="0.4.4",
          base_step_s={1: 1 / 88.61}, tree=(8, 8, 64),
          notes="88.61 tok/s plain, 234.54 with EAGLE-3 (steps 8, topk 8, 64 draft tokens), AL 5.88"),
    Point("Llama-3.1-8B EAGLE-1 K=2, 4, 7, bs1", "vllm-project/vllm PR #16937 (vLLM V1, 2025-04, H100, MT-bench, "
          "output tok/s)", "vLLM", "llama-3.1-8b-instruct", "h100", EAGLE1_FULL_VOCAB, Parallelism(), 1, "bf16", 128,
          512, {2: VLLM_20780_AL_E1[2], 4: VLLM_20780_AL_E1[4], 7: VLLM_20780_AL_E1[7]},
          {(1, 2): 1.51, (1, 4): 1.48, (1, 7): 1.27}, "calibration", release="0.8.5", base_step_s={1: 1 / 133},
          notes="vanilla 133 tok/s; AL from vllm #20780 (same author, drafter and benchmark, 3 months later); "
                "EAGLE-1 priced as a one-layer EAGLE head drafting over the full 128k vocabulary"),
    Point("Llama-3.1-8B EAGLE-3 K=2, bs1", "vllm-project/vllm PR #16937 (vLLM V1, 2025-04, H100, MT-bench)", "vLLM",
          "llama-3.1-8b-instruct", "h100", EAGLE3_32K, Parallelism(), 1, "bf16", 128, 512, {2: VLLM_20780_AL[2]},
          {(1, 2): 1.65}, "calibration", release="0.8.5", notes="220.21 tok/s vs 133 vanilla; AL from vllm #20780"),
    Point("Llama-3.1-8B EAGLE-1 K-sweep, bs1", "vllm-project/vllm issue #20780 (vLLM V1, 2025-07, EAGLE-1 TPOT "
          "column)", "vLLM", "llama-3.1-8b-instruct", "h100", EAGLE1_FULL_VOCAB, Parallelism(), 1, "bf16", 128, 512,
          VLLM_20780_AL_E1, {(1, k): 7.07 / t for k, t in zip(range(2, 8), (4.37, 4.29, 4.48, 4.71, 4.94, 5.2),
                                                              strict=True)}, "validation", release="0.9.2",
          notes="the same source as the EAGLE-3 K-sweep (its other drafter's column; that column was vLLM 0.9.2's "
                "calibration until the split rule held the whole source out)"),
    # ---- added for issue 36 from 12 further public points (each cited by its source below); split decided before any fit: the
    # whole source held out (validation). Its vLLM main of 2025-04-09 has no fitted profile of its own: it is
    # priced by the release rule (core/host_costs.py release_host_profile), which is what this source checks.
    Point("Llama-3-8B EAGLE-1 K=2, 4, bs1", "vllm-project/vllm PR #16035 (vLLM V1 main, 2025-04-09, GPU not stated "
          "(same author's H100 runs), MT-bench, offline est. output tok/s)", "vLLM", "llama-3.1-8b-instruct", "h100",
          EAGLE1_FULL_VOCAB, Parallelism(), 1, "bf16", 128, 512, {2: 1.89, 4: 2.08},
          {(1, 2): 175.49 / 128.64, (1, 4): 165.65 / 128.64}, "validation", release="0.8.4",
          base_step_s={1: 1 / 128.64},
          notes="Llama-3-8B priced with Llama-3.1-8B's shape (same layers, widths and vocabulary); vanilla 128.64 "
                "tok/s (includes prefill); AL 1.89 / 2.08 from the author's patched metric; release 0.8.4 = the "
                "main branch between 0.8.3 (04-06) and 0.8.4 (04-14): no fitted profile"),
]

# The split rule's test, per priced source (Point.source_id): (reports its own numbers as a performance bug, the
# source's words or why not). Read from the stored copies of the sources (issues corpus, 2026-12).
REPORTS_PERFORMANCE_BUG: dict[str, tuple[bool, str]] = {
    "vllm-project/vllm issue #20780": (True, "labelled bug, titled '[Bug]:' (2025-07-10): 'Eagle 3 is expected to "
                                       "be much faster than Eagle 1 ... E3 is better than E1 by only ~5% on their "
                                       "best config. Is this expected?'"),
    "Tencent/AngelSlim issue #163": (True, "'How to repreduce the reported results of Qwen3-30B-A3B with EAGLE3?' "
                                     "(2025-12-08): 'I can't reproduce the results of Qwen3-30B-A3B with EAGLE3 "
                                     "which there is speed degrade'"),
    "sgl-project/SpecForge issue #339": (True, "titled 'Throughput degradation on Qwen3-30B-A3B with EAGLE3' "
                                         "(2025-12-01): 'I got a throughput degrade when I try to EAGLE3 to speed "
                                         "up Qwen3-30B-A3B'"),
    "EAGLE-3 paper": (False, "the method's paper: its tables are its results"),
    "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1": (False, "a release blog: the numbers are the "
                                                              "feature's results"),
    "NVIDIA/TensorRT-LLM PR #5146": (False, "a correctness fix (acceptance length 1 or draft_len from NaN logits "
                                     "before it): the speedups are quoted as the fixed state, not as a defect"),
    "sgl-project/sglang PR #4716": (False, "'Fix EAGLE3 for llama3.3 70b': the throughput is quoted as the fixed "
                                    "state"),
    "vllm-project/vllm PR #16937": (False, "the EAGLE-3 support PR: the speedups are its results"),
    "vllm-project/vllm PR #16035": (False, "the EAGLE model-loading PR: 'k=2 is 36% faster' is its result"),
}
SPLIT_RULE = ("a source that reports its own numbers as a performance bug (REPORTS_PERFORMANCE_BUG) is held out, "
              "never fitted; applied to every source (issue 44 item 5), stated in issue 36 for new points only")


def apply_split_rule(points: list[Point]) -> list[Point]:
    """The points with the split rule applied: a source whose entry in REPORTS_PERFORMANCE_BUG is true goes to the
    validation split (``moved`` says from where and why); an unclassified source is an error, not a default."""
    out = []
    for p in points:
        if p.source_id not in REPORTS_PERFORMANCE_BUG:
            raise KeyError(f"{p.name}: source {p.source_id!r} is not classified in REPORTS_PERFORMANCE_BUG")
        bug, _why = REPORTS_PERFORMANCE_BUG[p.source_id]
        if bug and p.split != "validation":
            p = replace(p, split="validation", moved=f"{p.split} -> validation: {p.source_id} reports its own "
                                                     "numbers as a performance bug")
        out.append(p)
    return out


POINTS = apply_split_rule(POINTS_AS_ASSIGNED)

# Public points looked at for issue 36 (sources cited per entry) and not priced, decided before any fit, with the reason.
EXCLUDED = [
    {"points": "B1, B2 (LMSYS blog 2025-07-17, SGLang MTP, DeepSeek-V3, 16x H200)", "reason": "attention data "
     "parallelism (DP16) with DeepEP expert parallelism across two 8-GPU nodes, prefill disaggregated, 64K context: "
     "a plain step of 39 ms at 2 requests per rank is dominated by the inter-node all-to-all the step model does "
     "not price (it has tensor parallelism over NVLink only); pricing it would test a model we do not have"},
    {"points": "F1 (sglang PR #4716, Llama-3.3-70B EAGLE-3 tree, TP8)", "reason": "already in the repository's "
     "held-out split since i27 (SGLang 0.4.4)"},
    {"points": "H1-H6 (Spec-Bench A100 leaderboard, HF transformers eager)", "reason": "not a serving engine: "
     "PyTorch eager without CUDA graphs, whose per-kernel launch cost no framework profile here describes (the "
     "planner plans for TensorRT-LLM; the sheet itself says to include it only with a 'non-optimized runtime' "
     "term); SpS runs HF's dynamic draft length (no fixed D); PLD proposes up to 10 tokens of variable length"},
]


