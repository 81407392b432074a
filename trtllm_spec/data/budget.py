"""The data budget: what a regeneration / features / training run will cost, printed before it starts.

Conversations, tokens to generate, feature bytes (tokens x captured layers x hidden x bytes per value), free disk
where they go, the memory the regeneration batch needs (weights + its KV cache, batch x (prompt + new tokens) x
layers x KV width, + the hidden states it holds until the batch ends) against free RAM or device memory, and
predicted times from this machine's measured rates (``rates.json`` in the asset cache, written by every run) or,
on a GPU, from the hardware catalogue's roofline. A run whose features cannot fit the free disk, or whose batch
cannot fit memory, is refused before it starts (``BudgetError``, exit 2) with the numbers and the fixes.

Token counts are upper bounds (every prompt ``max_prompt_tokens`` long, every reply ``regen_max_new_tokens``):
the KV cache is allocated for that width, and a budget that holds for the worst case holds for the run.
No torch import unless the device is CUDA (free device memory).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtllm_spec.errors import UserError

DISK_MARGIN = 0.95  # leave 5% of the free disk
MEM_MARGIN = 0.90  # leave 10% of the free memory
FEATURE_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp32": 4.0}
RATES_FILE = "rates.json"


class BudgetError(UserError):
    """The run cannot fit this machine's disk or memory (exit 2, before anything starts)."""


@dataclass
class Budget:
    conversations: int
    remaining: int
    prompt_tokens: int  # upper bound, remaining conversations
    new_tokens: int  # upper bound, remaining conversations
    backend: str
    device: str
    dtype: str
    batch_size: int
    captured_layers: list[int]
    hidden_size: int
    feature_dtype: str
    feature_bytes: float
    features_dir: str
    free_disk_bytes: float | None
    weight_bytes: float
    kv_bytes_per_token: float
    batch_kv_bytes: float
    batch_feature_bytes: float
    batch_memory_bytes: float
    free_memory_bytes: float | None
    memory_kind: str  # "RAM" | "device memory" | "server"
    regen_seconds: float | None
    regen_rate_source: str
    train_tokens: int
    train_seconds: float | None
    train_rate_source: str
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {**asdict(self), "fits": self.fits}

    def lines(self) -> list[str]:
        feat = (f"{_gb(self.feature_bytes)} of {self.feature_dtype} features ({self.prompt_tokens + self.new_tokens} "
                f"tokens x {len(self.captured_layers)}+1 layers x {self.hidden_size}) into {self.features_dir}, "
                f"free {_gb(self.free_disk_bytes)}" if self.captured_layers else "no features kept (online training)")
        mem = (f"regeneration batch {self.batch_size} on the server (its memory is the server's)"
               if self.memory_kind == "server" else
               f"regeneration batch {self.batch_size} ({self.device}, {self.dtype}) needs {_gb(self.batch_memory_bytes)}"
               f" (weights {_gb(self.weight_bytes)} + KV cache {_gb(self.batch_kv_bytes)} + held features "
               f"{_gb(self.batch_feature_bytes)}), free {self.memory_kind} {_gb(self.free_memory_bytes)}")
        return [
            f"budget: {self.conversations} conversations ({self.remaining} to generate, {self.backend} backend), "
            f"up to {self.prompt_tokens} prompt + {self.new_tokens} new tokens",
            f"budget: {feat}",
            f"budget: {mem}",
            f"budget: predicted regeneration {_dur(self.regen_seconds)} ({self.regen_rate_source}); training "
            f"{self.train_tokens} tokens {_dur(self.train_seconds)} ({self.train_rate_source})",
        ]

    def check(self) -> None:
        if self.problems:
            raise BudgetError("; ".join(self.problems) + ". Fixes: " + "; ".join(self.fixes))


def _gb(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x / 1e12:.2f} TB" if x >= 1e12 else f"{x / 1e9:.2f} GB" if x >= 1e8 else f"{x / 1e6:.1f} MB"


def _dur(s: float | None) -> str:
    if s is None:
        return "unknown"
    return f"{s / 86400:.1f} days" if s >= 86400 else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min"


# ---- machine ------------------------------------------------------------------------------------------

def free_disk(path: Path) -> float:
    """Free bytes on the file system that ``path`` (or its nearest existing parent) lives on."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return float(shutil.disk_usage(p).free)


def free_ram() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def free_device_memory(device: str) -> float | None:
    if device == "cpu":
        return free_ram()
    import torch

    free, _total = torch.cuda.mem_get_info()
    return float(free)


# ---- measured rates ---------------------------------------------------------------------------------------

def _rates_path() -> Path:
    from trtllm_spec.core.targets import cache_dir

    return cache_dir() / RATES_FILE


def rate_key(kind: str, target_cfg: dict, **what) -> str:
    """One key per (what was measured, which target shape, how): e.g. regen/llama-30x576/ours/cpu/bf16/b32."""
    shape = f"{target_cfg.get('model_type', '?')}-{target_cfg.get('num_hidden_layers', '?')}x" \
            f"{target_cfg.get('hidden_size', '?')}"
    return "/".join([kind, shape, *(f"{k}={v}" for k, v in sorted(what.items()))])


def measured_rate(key: str) -> float | None:
    try:
        data = json.loads(_rates_path().read_text())
    except (OSError, ValueError):
        return None
    rec = data.get(key) if isinstance(data, dict) else None
    return float(rec["tokens_per_s"]) if isinstance(rec, dict) and rec.get("tokens_per_s") else None


def record_rate(key: str, tokens: int, seconds: float) -> None:
    """Remember a measured rate (runs shorter than a second or of under 64 tokens teach nothing)."""
    if seconds < 1.0 or tokens < 64:
        return
    from trtllm_spec.core.files import write_json_atomic

    p = _rates_path()
    try:
        data = json.loads(p.read_text()) if p.is_file() else {}
    except (OSError, ValueError):
        data = {}
    data[key] = {"tokens_per_s": round(tokens / seconds, 2), "tokens": tokens, "seconds": round(seconds, 2),
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(p, data)
    except OSError:
        pass  # a read-only cache only loses the prediction


# ---- the target ----------------------------------------------------------------------------------------

def _kv_per_token_elems(cfg: dict, shape) -> float:
    """KV elements one token stores over all layers (the planner's shape when it knows the family; otherwise the
    standard config keys, so a family the planner cannot price still gets a budget)."""
    if shape is not None:
        return shape.kv_bytes_per_token("fp32") / 4.0
    heads = cfg.get("num_attention_heads") or 1
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    if cfg.get("kv_lora_rank"):  # MLA
        return float(cfg["num_hidden_layers"] * (cfg["kv_lora_rank"] + cfg.get("qk_rope_head_dim", 0)))
    return float(cfg["num_hidden_layers"] * 2 * kv * head_dim)


def _param_count(cfg: dict, shape) -> float:
    if shape is not None:
        return float(shape.total_params())
    h, n, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg.get("vocab_size", 32000)
    inter = cfg.get("intermediate_size", 4 * h)
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1
    moe_inter = cfg.get("moe_intermediate_size") or inter
    return float(n * (4 * h * h + 3 * h * moe_inter * experts) + 2 * v * h)


def _weight_bytes(cfg: dict, shape, dtype: str) -> float:
    return _param_count(cfg, shape) * (4.0 if dtype == "fp32" else 2.0)


# ---- the estimate -------------------------------------------------------------------------------------

def estimate(recipe, target, data_dir: Path, *, backend: str = "ours", device: str = "cpu", dtype: str = "bf16",
             done: int = 0, capture: tuple[int, ...] = (), feature_dtype: str | None = None,
             gpu: str | None = None) -> Budget:
    """The budget of the recipe's drafter-data stage. ``target`` is a ResolvedTarget (its shape may be None-like
    for families the planner does not know: pass ``target.config`` through a target whose shape failed)."""
    d = recipe.drafter.training.data
    tc = recipe.drafter.training
    cfg = target.config
    feature_dtype = feature_dtype or d.features_dtype
    shape = getattr(target, "shape", None)
    n = d.num_conversations
    remaining = max(0, n - done)
    prompt, new = remaining * d.max_prompt_tokens, remaining * d.regen_max_new_tokens
    from trtllm_spec.core.shape import text_value

    hidden = int(text_value(cfg, "hidden_size") or 0)
    fbytes = (prompt + new) * (len(capture) + 1) * hidden * FEATURE_BYTES[feature_dtype] if capture else 0.0
    disk = free_disk(data_dir) if capture else None
    served = backend == "openai"
    act = 4.0 if dtype == "fp32" else 2.0
    width = d.max_prompt_tokens + d.regen_max_new_tokens + 2
    b = d.regen_batch_size
    kv_tok = _kv_per_token_elems(cfg, shape) * act
    weights = 0.0 if served else _weight_bytes(cfg, shape, dtype)
    batch_kv = 0.0 if served else b * width * kv_tok
    batch_feat = 0.0 if served or not capture else b * width * (len(capture) + 1) * hidden * act
    logits = 0.0 if served else b * cfg.get("vocab_size", 0) * 4.0 * 2
    need = weights + batch_kv + batch_feat + logits
    free_mem = None if served else free_device_memory(device)
    # predicted times
    rkey = rate_key("regen", cfg, backend=backend, device=device, dtype=dtype, batch=b)
    rate, source = measured_rate(rkey), "measured on this machine"
    if rate is None and device != "cpu" and not served:
        rate, source = _roofline_decode_rate(gpu, weights, kv_tok, width, b)
    regen_s = new / rate if rate and remaining else (0.0 if not remaining else None)
    if regen_s is None:
        source = "no measured rate yet: the first run records one"
    train_tokens = tc.max_steps * tc.batch_size * tc.grad_accum * tc.seq_len
    tkey = rate_key("train", cfg, drafter=recipe.drafter.type, device=device)
    trate = measured_rate(tkey)
    train_s = train_tokens / trate if trate else None
    if tc.time_budget_minutes and (train_s is None or train_s > tc.time_budget_minutes * 60):
        train_s, tsource = tc.time_budget_minutes * 60, "capped by time_budget_minutes"
    else:
        tsource = "measured on this machine" if trate else "no measured rate yet: the first run records one"
    bud = Budget(n, remaining, prompt, new, backend, device, dtype, b, list(capture), hidden, feature_dtype, fbytes,
                 str(data_dir / "features"), disk, weights, kv_tok, batch_kv, batch_feat, need, free_mem,
                 "server" if served else ("RAM" if device == "cpu" else "device memory"), regen_s, source,
                 train_tokens, train_s, tsource)
    _judge(bud, d)
    return bud


def _roofline_decode_rate(gpu: str | None, weights: float, kv_tok: float, width: int, batch: int):
    """Tokens/s of batched decoding on a catalogue GPU: each step reads the weights once and half the KV cache
    on average (memory-bound)."""
    if not gpu:
        return None, "no measured rate and no GPU named"
    from trtllm_spec.core.hardware import load_hardware

    hw = load_hardware(gpu)
    step = (weights + batch * kv_tok * width / 2) / hw.achievable_mem_bytes_per_s
    return batch / step if step > 0 else None, f"{hw.name} roofline from the hardware catalogue"


def _disk_judge(problems: list[str], fixes: list[str], feature_bytes: float, free: float | None, folder) -> None:
    if free is not None and feature_bytes > DISK_MARGIN * free:
        problems.append(f"the features need up to {_gb(feature_bytes)} but {folder} has {_gb(free)} free")
        fixes.append("fewer conversations (--set drafter.training.data.num_conversations=N), shorter sequences "
                     "(data.regen_max_new_tokens / data.max_prompt_tokens), fp8 features (--features-dtype fp8), "
                     "online training (--set drafter.training.data.offline_features=false), or another folder (--out)")


@dataclass
class FeatureBudget:
    """``data features``: the exact tokens still to capture (the conversations exist), their bytes vs free disk,
    and the predicted time from this machine's measured capture rate."""
    conversations: int
    remaining: int
    tokens: int  # exact, remaining conversations
    layers: list[int]  # captured (the final post-norm state comes on top)
    hidden: int
    dtype: str
    bytes: float
    folder: str
    free_bytes: float | None
    seconds: float | None
    rate_source: str
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"budget: features of {self.remaining}/{self.conversations} conversations ({self.tokens} tokens x "
                f"{len(self.layers)}+1 layers x {self.hidden}, {self.dtype}) = {_gb(self.bytes)} into {self.folder}, "
                f"free {_gb(self.free_bytes)}",
                f"budget: predicted feature capture {_dur(self.seconds)} ({self.rate_source})"]

    check = Budget.check


def bytes_per_token(n_layers: int, hidden: int, dtype: str) -> float:
    """Stored feature bytes per token (``data/features``): captured layers + final hidden, plus the fp8 scales and
    the ids/mask."""
    per = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}[dtype]
    scales = 4.0 * (n_layers + 1) if dtype == "fp8" else 0.0
    return (n_layers + 1) * hidden * per + scales + 5.0


def feature_budget(conversations: int, remaining: int, tokens: int, layers: list[int], hidden: int, dtype: str,
                   folder: Path, rate_key_: str) -> FeatureBudget:
    fbytes = tokens * bytes_per_token(len(layers), hidden, dtype)
    rate = measured_rate(rate_key_)
    seconds = tokens / rate if rate else (0.0 if not tokens else None)
    source = "measured on this machine" if rate else "no measured rate yet: the first run records one"
    b = FeatureBudget(conversations, remaining, tokens, list(layers), hidden, dtype, fbytes, str(folder),
                      free_disk(folder), seconds, source)
    _disk_judge(b.problems, b.fixes, fbytes, b.free_bytes, folder)
    return b


def _judge(b: Budget, d) -> None:
    if b.captured_layers:
        _disk_judge(b.problems, b.fixes, b.feature_bytes, b.free_disk_bytes, b.features_dir)
    if b.free_memory_bytes is not None and b.batch_memory_bytes > MEM_MARGIN * b.free_memory_bytes:
        b.problems.append(f"the regeneration batch needs {_gb(b.batch_memory_bytes)} (KV cache "
                          f"{_gb(b.batch_kv_bytes)} for {b.batch_size} rows x "
                          f"{d.max_prompt_tokens + d.regen_max_new_tokens} tokens) but {b.memory_kind} has "
                          f"{_gb(b.free_memory_bytes)} free")
        fit = _rows_that_fit(b)
        b.fixes.append(f"a smaller batch (--set drafter.training.data.regen_batch_size={fit})" if fit else
                       "a smaller batch is not enough")
        b.fixes.append("shorter replies (--set drafter.training.data.regen_max_new_tokens=N), or a server "
                       "('data regenerate --server-url URL'; the features step runs after it)")


def _rows_that_fit(b: Budget) -> int:
    per_row = (b.batch_memory_bytes - b.weight_bytes) / max(1, b.batch_size)
    room = MEM_MARGIN * (b.free_memory_bytes or 0) - b.weight_bytes
    return int(room // per_row) if per_row > 0 and room > 0 else 0
