"""Roofline cost model of one forward pass, per GPU.

For a pass over ``batch`` sequences with ``q_len`` new tokens each (GEMM M = batch * q_len) at context C:

- linear layers:  t = max(2 * M * P / F(M),  (P * bytes_w + activations) / BW)        [P: weight elements]
- MoE layers:     distinct experts touched by M tokens, each picking top_k of E:
                  E_touched = E * (1 - (1 - k/E)^M); weight traffic = E_touched experts, compute = M * k experts
- attention:      per layer, per sequence: KV bytes = C * kv_elems * bytes_kv;
                  FLOPs = kv_heads * ceil(G * q_len / tile) * tile * C * flops_per_row  (rows padded to the
                  kernel tile: run time steps when G * q_len crosses a tile boundary -- guideline 3)
                  t = max(FLOPs / F_attn, KV bytes / BW)
- tensor parallel: 2 all-reduces of M * H activations per layer, ring: 2 (tp-1)/tp * bytes / link + latency
- overheads:      per layer per forward (kernel gaps, in units of a dense layer: MLA +1, MoE +3), per expert
                  touched per GPU, and, for the target, per iteration (host, sampling)

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


def gemm_time_s(hw: Hardware, params: float, m: int, prec: Precision, act_elems: float = 0.0) -> float:
    """Linear layers with ``params`` weight elements (on this GPU) at GEMM-M = m rows."""
    if params <= 0 or m <= 0:
        return 0.0
    compute_s = 2.0 * m * params / hw.gemm_flops_per_s(prec.weight, m)
    traffic_s = (params * prec.weight_bytes + act_elems * prec.act_bytes) / hw.achievable_mem_bytes_per_s
    return max(compute_s, traffic_s)


def experts_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts hit when ``tokens`` tokens each route to ``top_k`` of ``num_experts``."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def layer_linear_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, m: int) -> float:
    """All linear layers of the decoder stack (attention projections, dense FFN, MoE), one GPU's share."""
    h, tp = shape.hidden_size, par.tp
    attn_act = m * (2 * h + (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim) / tp
    t = shape.num_layers * gemm_time_s(hw, shape.attn_params_per_layer() / tp, m, prec, attn_act)
    if shape.num_dense_layers:
        mlp_act = m * (2 * h + 3 * shape.intermediate_size) / tp
        t += shape.num_dense_layers * gemm_time_s(hw, shape.dense_mlp_params() / tp, m, prec, mlp_act)
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
    return t + max(weight_s, compute_s) + tiles_s


def lm_head_time_s(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, m: int,
                   vocab: int | None = None) -> float:
    v = vocab or shape.vocab_size
    return gemm_time_s(hw, v * shape.hidden_size / par.tp, m, prec, m * (shape.hidden_size + v / par.tp))


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
    f_attn, bw = hw.attention_flops_per_s(prec.weight), hw.achievable_mem_bytes_per_s
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


def layer_overhead_units(shape: ModelShape) -> float:
    """Kernel-launch overhead of one forward in units of a dense GQA decoder layer (about a dozen kernels).
    An MLA layer adds ~1 unit (latent projections, absorbed BMMs); an MoE layer ~3 (routing, permute, two
    grouped GEMMs, finalize, expert-parallel exchange)."""
    units = shape.num_layers * (2.0 if shape.mla is not None else 1.0)
    if shape.moe is not None:
        units += 3.0 * shape.moe.num_moe_layers
    return units


def forward_time(shape: ModelShape, hw: Hardware, prec: Precision, par: Parallelism, batch: int, q_len: int,
                 context: int, lm_head_vocab: int | None = None, extra_params: float = 0.0) -> Breakdown:
    """One forward pass of ``shape`` (all its layers + lm_head) for ``batch`` x ``q_len`` tokens."""
    m = batch * q_len
    gemm = layer_linear_time_s(shape, hw, prec, par, m) + lm_head_time_s(shape, hw, prec, par, m, lm_head_vocab)
    gemm += gemm_time_s(hw, extra_params / par.tp, m, prec)
    attn = attention_time_s(shape, hw, prec, par, batch, q_len, context)
    comm = shape.num_layers * 2 * allreduce_time_s(hw, m * shape.hidden_size * prec.act_bytes, par.tp)
    comm += (par.pp - 1) * hw.overheads.allreduce_latency_s
    overhead = layer_overhead_units(shape) * hw.overheads.per_layer_s
    return Breakdown(gemm_s=gemm, attention_s=attn, comm_s=comm, overhead_s=overhead)


# ---- memory ----------------------------------------------------------------------------------------------

def weight_bytes_per_gpu(shape: ModelShape, prec: Precision, par: Parallelism) -> float:
    return shape.total_params() * prec.weight_bytes / (par.tp * par.pp)


def kv_bytes_per_token_per_gpu(shape: ModelShape, prec: Precision, par: Parallelism, context: int) -> float:
    """KV bytes one token occupies on one GPU (GQA heads split by tp; MLA latent replicated)."""
    per_token = shape.kv_bytes_per_token(prec.kv, context)
    shard = 1 if shape.mla is not None else shape.num_kv_heads / shape.kv_heads_per_gpu(par.tp)
    return per_token / shard / par.pp
