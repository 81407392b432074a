"""Cost model of one forward pass, per GPU: rooflines corrected for what real kernels do at small M.

For a pass over ``batch`` sequences with ``q_len`` new tokens each (GEMM M = batch * q_len) at context C:

- linear layers, per matrix [N, K] (``gemm_time_s``):
      t_mem  = (N K bytes_w + M (N + K) bytes_act) / BW
      t_comp = 2 * M_pad * N * K / (peak * eff_gemm) / wave_eff(M, N)
      t      = max(t_mem, t_comp) + (1 - overlap) * min(t_mem, t_comp)
  M_pad rounds M up to the kernel's row granularity; wave_eff is the wave quantisation of the CTA grid
  (``wave_efficiency``); ``overlap`` (Efficiency.gemm_overlap) is how much of the smaller of weight streaming
  and tensor-core work hides under the larger. overlap = 1 is the roofline max(); a decoder forward of small-M
  GEMMs behaves closer to the sum: vLLM's fitted step time for Llama-3.1-8B on one H100 is 5.9 ms + 21 us per
  batched token + 39 ns per KV token (SpecDecode-Bench/simulator ``predictor.py``, fitted on measured steps at
  batch 1-64), and 21 us per token is 2 P / (0.77 x 989 TFLOP/s) *added* to the weight stream, not hidden in it.
  A probed curve F(M) (``hw probe``) already holds the measured time at each M: t = max(t_mem, 2 M P / F(M)).
- MoE layers:     distinct experts touched by M tokens, each picking top_k of E:
                  E_touched = E * (1 - (1 - k/E)^M); weight traffic = E_touched experts, compute = M * k experts
- attention:      per layer, per sequence: KV bytes = C * kv_elems * bytes_kv (grows with batch x context);
                  FLOPs = kv_heads * ceil(G * q_len / tile) * tile * C * flops_per_row  (rows padded to the
                  kernel tile: run time steps when G * q_len crosses a tile boundary -- guideline 3)
                  t = max(FLOPs / F_attn, KV bytes / BW)
- tensor parallel: 2 all-reduces of M * H activations per layer, ring: 2 (tp-1)/tp * bytes / link + latency
- overheads:      per layer per forward (kernel gaps, in units of a dense layer: MLA +1, MoE +moe_layer_units),
                  per expert touched per GPU, and, for the target, per iteration (host, sampling; see search.target_step)

All times in seconds; F and BW are achievable (datasheet x efficiency, or probed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.core.shape import KV_BYTES, WEIGHT_BYTES, ModelShape


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    pp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class Precision:
    weight: str = "bf16"  # a WEIGHT_BYTES key
    kv: str = "bf16"  # a KV_BYTES key
    act_bytes: float = 2.0  # bytes per activation element

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_BYTES[self.weight]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv]


@dataclass
class Breakdown:
    """Seconds spent per component in one pass (or the sum of several)."""

    gemm_s: float = 0.0
    attention_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.comm_s + self.overhead_s

    def __add__(self, other: Breakdown) -> Breakdown:
        return Breakdown(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, k: float) -> Breakdown:
        return Breakdown(*(getattr(self, f.name) * k for f in fields(self)))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"total_s": self.total_s}


def padded_rows(m: int, granularity: int) -> int:
    """GEMM rows as the kernel computes them: M rounded up to its row granularity (the MMA tile's small side;
    small-M kernels swap A and B so the token dimension maps to the 8-wide side of the MMA)."""
    return -(-m // granularity) * granularity


def wave_efficiency(m: int, n: int, sm_count: int, tile_m: int, tile_n: int) -> float:
    """Fraction of the SMs' time a GEMM grid keeps busy (wave quantisation, NVIDIA 'Matrix Multiplication
    Background User's Guide'): ceil(M/tile_m) * ceil(N/tile_n) output tiles run in waves of ``sm_count``; the last
    wave runs part-empty. Grids smaller than one wave are filled by split-K (CUTLASS/cuBLAS), so they count as 1."""
    if m <= 0 or n <= 0 or sm_count <= 0:
        return 1.0
    ctas = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    if ctas <= sm_count:
        return 1.0
    return ctas / (math.ceil(ctas / sm_count) * sm_count)


def overlapped(a_s: float, b_s: float, overlap: float) -> float:
    """Two kernel phases of which ``overlap`` (0..1) of the shorter hides under the longer: 1 = max, 0 = sum."""
    return max(a_s, b_s) + (1.0 - overlap) * min(a_s, b_s)


def gemm_time_s(hw: Hardware, params: float, m: int, prec: Precision, act_elems: float = 0.0,
                n_out: int | None = None) -> float:
    """Linear layers with ``params`` weight elements (on this GPU) at GEMM-M = m rows; ``n_out`` (the output width
    of one matrix) enables wave quantisation. Probed curves are measured times: max(traffic, 2 m P / F(m))."""
    if params <= 0 or m <= 0:
        return 0.0
    traffic_s = (params * prec.weight_bytes + act_elems * prec.act_bytes) / hw.achievable_mem_bytes_per_s
    if hw.has_gemm_curve(prec.weight):
        return max(2.0 * m * params / hw.gemm_flops_per_s(prec.weight, m), traffic_s)
    compute_s = _tiled_compute_s(hw, params, m, prec, n_out)
    full = (m - 1) // hw.gemm_tile_m * hw.gemm_tile_m  # M with every M-tile below this one full
    if full > 0:  # a partly filled last M-tile adds CTAs without a wave: never cheaper than the full tiles below it
        compute_s = max(compute_s, _tiled_compute_s(hw, params, full, prec, n_out))
    return overlapped(compute_s, traffic_s, hw.efficiency.gemm_overlap)


def _tiled_compute_s(hw: Hardware, params: float, m: int, prec: Precision, n_out: int | None) -> float:
    """Tensor-core time of a GEMM at M = m: padded rows over the GPU's flops, divided by the wave efficiency."""
    rows = padded_rows(m, hw.gemm_row_granularity)
    waves = wave_efficiency(m, n_out or 0, hw.sm_count, hw.gemm_tile_m, hw.gemm_tile_n)
    return 2.0 * rows * params / hw.gemm_flops_per_s(prec.weight, m) / waves


def experts_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts hit when ``tokens`` tokens each route to ``top_k`` of ``num_experts``."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def layer_linear_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, m: int) -> float:
    """All linear layers of the decoder stack (fused QKV, O, fused gate/up, down; MoE), one GPU's share."""
    h, tp = shape.hidden_size, par.tp
    q_kv = (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim
    attn = shape.attn_params_per_layer() / tp
    if shape.mla is None:  # QKV [q+2kv, h] then O [h, q]: split the parameters by matrix for wave quantisation
        qkv = h * q_kv / tp
        t = gemm_time_s(hw, qkv, m, prec, m * (h + q_kv / tp), q_kv // tp)
        t += gemm_time_s(hw, attn - qkv, m, prec, m * (h + shape.num_heads * shape.head_dim / tp), h)
    else:
        t = gemm_time_s(hw, attn, m, prec, m * (2 * h + q_kv / tp))
    t *= shape.num_layers
    if shape.num_dense_layers:
        inter = shape.intermediate_size
        up = gemm_time_s(hw, 2 * h * inter / tp, m, prec, m * (h + 2 * inter / tp), 2 * inter // tp)
        down = gemm_time_s(hw, h * inter / tp, m, prec, m * (h + inter / tp), h)
        t += shape.num_dense_layers * (up + down)
    if shape.moe is not None:
        t += shape.moe.num_moe_layers * moe_layer_time_s(shape, hw, prec, par, m)
    return t


def moe_layer_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, m: int) -> float:
    moe = shape.moe
    assert moe is not None
    dense_params = (shape.shared_expert_params() + shape.router_params()) / par.tp
    t = gemm_time_s(hw, dense_params, m, prec, m * 2 * shape.hidden_size) if dense_params else 0.0
    touched = experts_touched(moe.num_experts, moe.top_k, m)
    rows_per_expert = max(1, round(m * moe.top_k / touched))
    weight_s = touched * shape.expert_params() / par.tp * prec.weight_bytes / hw.achievable_mem_bytes_per_s
    compute_s = 2.0 * m * moe.top_k * shape.expert_params() / par.tp / hw.gemm_flops_per_s(prec.weight,
                                                                                            rows_per_expert)
    tiles_s = touched / par.ep * hw.overheads.per_expert_s  # latency-bound grouped-GEMM work per expert
    overlap = 1.0 if hw.has_gemm_curve(prec.weight) else hw.efficiency.gemm_overlap
    return t + overlapped(weight_s, compute_s, overlap) + tiles_s


def lm_head_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, m: int,
                   vocab: int | None = None) -> float:
    v = vocab or shape.vocab_size
    return gemm_time_s(hw, v * shape.hidden_size / par.tp, m, prec, m * (shape.hidden_size + v / par.tp), v // par.tp)


def sampling_time_s(hw: Hardware, rows: int, vocab: int, tp: int = 1) -> float:
    """Reading the fp32 logits of ``rows`` positions once more for sampling / acceptance (a memory-bound pass the
    lm_head GEMM does not include): rows * vocab / tp * 4 bytes / BW. Grows with B (1 + D)."""
    return rows * vocab / tp * 4.0 / hw.achievable_mem_bytes_per_s


def attention_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, batch: int,
                     q_len: int, context: int) -> float:
    """Decode attention over the KV cache for ``batch`` sequences, ``q_len`` query tokens each."""
    if batch <= 0 or context <= 0:
        return 0.0
    g, kvh, tile = shape.group_size(par.tp), shape.kv_heads_per_gpu(par.tp), hw.attention_tile_rows
    padded_rows = math.ceil(g * q_len / tile) * tile
    if shape.mla is not None:
        kv_elems = shape.mla.kv_lora_rank + shape.mla.qk_rope_head_dim  # latent replicated on every rank
        flops_per_row = 2 * kv_elems + 2 * shape.mla.kv_lora_rank
    else:
        kv_elems = 2 * kvh * shape.head_dim
        flops_per_row = 4 * shape.head_dim
    f_attn, bw = hw.attention_flops_per_s(prec.weight), hw.attention_kv_bytes_per_s or hw.achievable_mem_bytes_per_s
    total = 0.0
    for n_layers, ctx in shape.layer_contexts(context):
        flops = batch * kvh * padded_rows * ctx * flops_per_row
        kv_bytes = batch * ctx * kv_elems * prec.kv_bytes
        total += n_layers * max(flops / f_attn, kv_bytes / bw)
    return total


def allreduce_time_s(hw: Hardware, nbytes: float, tp: int) -> float:
    if tp <= 1:
        return 0.0
    link = hw.interconnect_bytes_per_s * hw.efficiency.interconnect
    if link <= 0:
        return math.inf
    return 2.0 * (tp - 1) / tp * nbytes / link + hw.overheads.allreduce_latency_s


def layer_overhead_units(shape: ModelShape, moe_layer_units: float = 3.0) -> float:
    """Kernel-launch overhead of one forward in units of a dense GQA decoder layer (about a dozen kernels).
    An MLA layer adds ~1 unit (latent projections, absorbed BMMs); an MoE layer ``moe_layer_units``
    (Overheads.moe_layer_units: routing, permute, two grouped GEMMs, finalize, expert-parallel exchange). How
    many depends on the engine's MoE path (TensorRT-LLM's unfused DeepSeek-R1 path: ~3; a fused MoE kernel such
    as SGLang's Triton ``fused_moe`` launches fewer), so it is a framework profile field, not a constant."""
    units = shape.num_layers * (2.0 if shape.mla is not None else 1.0)
    if shape.moe is not None:
        units += moe_layer_units * shape.moe.num_moe_layers
    return units


def forward_time(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, batch: int, q_len: int,
                 context: int, lm_head_vocab: int | None = None, extra_params: float = 0.0,
                 gemm_batch: int | None = None) -> Breakdown:
    """One forward pass of ``shape`` (all its layers + lm_head) for ``batch`` x ``q_len`` tokens; ``gemm_batch``:
    the batch the GEMMs run at when the engine pads it (a captured CUDA-graph size, planner/step.snap_batch)."""
    m = (gemm_batch or batch) * q_len
    gemm = layer_linear_time_s(shape, hw, prec, par, m) + lm_head_time_s(shape, hw, prec, par, m, lm_head_vocab)
    gemm += gemm_time_s(hw, extra_params / par.tp, m, prec)
    attn = attention_time_s(shape, hw, prec, par, batch, q_len, context)
    comm = shape.num_layers * 2 * allreduce_time_s(hw, m * shape.hidden_size * prec.act_bytes, par.tp)
    comm += (par.pp - 1) * hw.overheads.allreduce_latency_s
    overhead = layer_overhead_units(shape, hw.overheads.moe_layer_units) * hw.overheads.per_layer_s
    return Breakdown(gemm_s=gemm, attention_s=attn, comm_s=comm, overhead_s=overhead)


# ---- memory ----------------------------------------------------------------------------------------------

def weight_bytes_per_gpu(shape: ModelShape, prec: Precision, par: Parallelism) -> float:
    return shape.total_params() * prec.weight_bytes / (par.tp * par.pp)


def kv_bytes_per_token_per_gpu(shape: ModelShape, prec: Precision, par: Parallelism, context: int) -> float:
    """KV bytes one token occupies on one GPU (GQA heads split by tp; MLA latent replicated)."""
    per_token = shape.kv_bytes_per_token(prec.kv, context)
    shard = 1 if shape.mla is not None else shape.num_kv_heads / shape.kv_heads_per_gpu(par.tp)
    return per_token / shard / par.pp
