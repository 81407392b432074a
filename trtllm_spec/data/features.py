"""``data features``: the target's hidden states over the training conversations, as their own step.

One teacher-forced forward of the target per batch of conversations (``output_hidden_states``, any architecture
transformers loads, ``data/regen_hf.HFEngine``) keeps what offline EAGLE-3 training reads: ``aux`` = the captured
layers' outputs concatenated ([T, n*H], hidden_states[i + 1] for layer i) and ``hidden`` = the final post-norm
state ([T, H]), with the token ids and the assistant mask they were computed over. It works after any regeneration
backend (ours, hf, an OpenAI-compatible server) and on multi-turn data; our own decoder keeps the same states while
it decodes (``FeatureWriter``, computed anyway), which this step then skips (``benchmarks/decisions/features_step.md``: on a
2-core CPU a separate pass costs 0.6-0.75x the regeneration).

Layout of a features folder: ``{part}-{n:06d}.safetensors`` shards (``{key}.input_ids`` int32, ``{key}.assistant``
uint8, ``{key}.aux`` / ``{key}.hidden`` in the stored dtype, fp8 with ``{key}.aux_scale`` / ``{key}.hidden_scale``
float32 per row and captured layer) and one index per writer (``index.json``, or ``index-I-of-N.json`` for
``--shard I/N`` / torchrun ranks, so parallel writers never share a file): the target's name and config hash, the
layer set, hidden size, dtype, per conversation id its shard, key and token count, per shard its counts. A shard
is written to ``NAME.partial`` and renamed, then the index is rewritten atomically: a run killed (or a disk that
fills) mid-shard leaves the index intact and the partial shard is discarded; a rerun skips the ids any index lists.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.files import write_json_atomic
from trtllm_spec.errors import UserError

SCHEMA = "trtllm-spec/features/v1"
FEATURE_DTYPES = ("bf16", "fp8", "fp32")
FP8_MAX = 448.0  # largest finite float8_e4m3fn


class FeaturesMismatch(UserError):
    """A features folder written for another target, layer set, hidden size or dtype."""


@dataclass(frozen=True)
class FeatureSpec:
    """What every index of one folder must agree on."""
    target: str
    target_config_sha256: str
    layers: tuple[int, ...]
    hidden_size: int
    dtype: str

    def header(self) -> dict:
        return {"schema": SCHEMA, "target": self.target, "target_config_sha256": self.target_config_sha256,
                "layers": list(self.layers), "hidden_size": self.hidden_size, "dtype": self.dtype}


def spec_for(target_dir: Path, name: str, layers: tuple[int, ...], dtype: str) -> FeatureSpec:
    from trtllm_spec.core.files import sha256_file

    if dtype not in FEATURE_DTYPES:
        raise UserError(f"--features-dtype {dtype!r}: choose one of {', '.join(FEATURE_DTYPES)}")
    cfg = json.loads((target_dir / "config.json").read_text())
    from trtllm_spec.core.shape import text_value

    hidden = int(text_value(cfg, "hidden_size") or 0)
    return FeatureSpec(name, sha256_file(target_dir / "config.json"), tuple(layers), hidden, dtype)


def index_name(part: tuple[int, int] | None) -> str:
    return "index.json" if part is None or part[1] == 1 else f"index-{part[0]}-of-{part[1]}.json"


def read_indexes(folder: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(folder.glob("index*.json")):
        try:
            out[p.name] = json.loads(p.read_text())
        except ValueError:
            raise UserError(f"{p}: not a readable features index (a JSON file written by 'data features'); "
                            "delete the folder to start over") from None
    return out


def check_folder(folder: Path, spec: FeatureSpec) -> dict[str, dict]:
    """The folder's indexes, refused when one was written for another target, layer set, hidden size or dtype."""
    indexes = read_indexes(folder)
    want = spec.header()
    for name, idx in indexes.items():
        for key in ("target_config_sha256", "layers", "hidden_size", "dtype"):
            if idx.get(key) != want[key]:
                what = {"target_config_sha256": f"target {idx.get('target')!r} (config.json sha256)",
                        "layers": "captured layers", "hidden_size": "hidden size", "dtype": "dtype"}[key]
                raise FeaturesMismatch(
                    f"{folder / name}: these features are for {what} {idx.get(key)!r}, this run needs {want[key]!r} "
                    f"(target {spec.target!r}); give another folder (--out) or delete this one")
    return indexes


# ---- storage dtypes ----------------------------------------------------------------------------------------

def encode(x, dtype: str, groups: int = 1) -> dict:
    """{"": values} in ``dtype``; fp8: float8_e4m3fn values and a float32 scale per row and column group (one
    group per captured layer), value = stored x scale."""
    import torch

    if dtype == "fp32":
        return {"": x.float().contiguous()}
    if dtype == "bf16":
        return {"": x.to(torch.bfloat16).contiguous()}
    g = x.float().reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
    scale = (g.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
    q = (g / scale).to(torch.float8_e4m3fn).reshape(x.shape)
    return {"": q.contiguous(), "_scale": scale.squeeze(-1).contiguous()}


def decode(values, scale=None):
    """Float32 values back from ``encode``."""
    if scale is None:
        return values.float()
    groups = scale.shape[-1]
    g = values.float().reshape(*values.shape[:-1], groups, values.shape[-1] // groups)
    return (g * scale.unsqueeze(-1)).reshape(values.shape)


# ---- writing ------------------------------------------------------------------------------------------------

@dataclass
class FeaturesReport:
    done: int
    skipped: int
    tokens: int
    seconds: float
    folder: Path
    placement: dict | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def sequences(convs: list[dict], tok) -> dict[str, tuple[list[int], list[int]]]:
    """id -> (token ids, assistant mask): the exact tokens regeneration kept (single-turn records), else the
    conversation through the target's chat template (what online training reads)."""
    from trtllm_spec.data.chat import tokenize_conversation

    out = {}
    for c in convs:
        if "tokens" in c and "assistant" in c:
            out[c["id"]] = (list(c["tokens"]), list(c["assistant"]))
        else:
            t = tokenize_conversation(tok, c["messages"], template_kwargs=c.get("chat_template_kwargs"))
            out[c["id"]] = (t.input_ids, t.assistant)
    return out


class FeatureWriter:
    """One writer's shards and index in ``folder`` (refused when the folder holds another target / layer set);
    ``add`` writes one shard and rewrites the index (see the module). Used by the features step and by our own
    decoder, which keeps the captured states while it regenerates (they are computed anyway)."""

    def __init__(self, folder: Path, spec: FeatureSpec, part: tuple[int, int] | None = None,
                 provenance: dict | None = None):
        indexes = check_folder(folder, spec)  # the folder itself is made by the first shard: a run that fails first
        self.folder, self.spec, self.name = folder, spec, index_name(part)
        self.own = indexes.get(self.name) or {**spec.header(), "part": f"{part[0]}/{part[1]}" if part else "0/1",
                                              "shards": {}, "conversations": {}}
        self.own["provenance"] = provenance
        self.prefix = self.name.removesuffix(".json").replace("index", "f", 1)
        for stale in folder.glob(f"{self.prefix}-*.partial"):  # a shard in flight when an earlier run stopped
            stale.unlink()
        self.done = {cid for idx in indexes.values() for cid in idx.get("conversations", {})}

    def add(self, ids: list[str], seqs: list[tuple[list[int], list[int]]], feats: list[dict]) -> int:
        """One shard of conversations ``ids`` ((token ids, mask), {"aux", "hidden"} each); returns its tokens."""
        import torch

        tensors = {}
        for key, ((tokens, mask), fe) in enumerate(zip(seqs, feats, strict=True)):
            tensors[f"{key}.input_ids"] = torch.tensor(tokens, dtype=torch.int32)
            tensors[f"{key}.assistant"] = torch.tensor(mask, dtype=torch.uint8)
            for name, groups in (("aux", len(self.spec.layers)), ("hidden", 1)):
                for suffix, t in encode(fe[name], self.spec.dtype, groups).items():
                    tensors[f"{key}.{name}{suffix}"] = t
        shard = f"{self.prefix}-{len(self.own['shards']):06d}.safetensors"
        self.folder.mkdir(parents=True, exist_ok=True)
        _save_shard(self.folder / shard, tensors)
        n_tok = sum(len(t) for t, _ in seqs)
        self.own["shards"][shard] = {"conversations": len(ids), "tokens": n_tok}
        self.own["conversations"].update({cid: {"shard": shard, "key": str(k), "tokens": len(seqs[k][0])}
                                          for k, cid in enumerate(ids)})
        write_json_atomic(self.folder / self.name, self.own)
        self.done.update(ids)
        return n_tok


def write_features(seqs: dict[str, tuple[list[int], list[int]]], engine, folder: Path, spec: FeatureSpec, *,
                   batch_size: int, part: tuple[int, int] | None = None, provenance: dict | None = None,
                   progress: Callable[[int, int, int], None] | None = None) -> FeaturesReport:
    """Teacher-forced features of ``seqs`` (id -> (ids, mask)) through ``engine`` (``HFEngine``: ``teacher_forced``)
    into ``folder``, one shard per batch (sorted by length so a batch pads little). Resumable (see the module)."""
    writer = FeatureWriter(folder, spec, part, provenance)
    done = len([c for c in seqs if c in writer.done])
    todo = sorted((cid for cid in seqs if cid not in writer.done), key=lambda c: len(seqs[c][0]))
    started, tokens = time.perf_counter(), 0
    for b in range(0, len(todo), batch_size):
        batch = todo[b:b + batch_size]
        feats = engine.teacher_forced([seqs[c][0] for c in batch], spec.layers)
        tokens += writer.add(batch, [seqs[c] for c in batch], feats)
        if progress:
            progress(done + b + len(batch), len(seqs), tokens)
    return FeaturesReport(len(todo), len(seqs) - len(todo), tokens, time.perf_counter() - started, folder)


def _save_shard(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(path.name.removesuffix(".safetensors") + ".partial")
    try:
        save_file(tensors, str(tmp))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"writing features shard {path} failed ({exc.strerror or exc}); the index is intact and "
                        "the partial shard was removed: free disk space (or use --features-dtype fp8) and rerun, "
                        "it resumes") from None
    tmp.replace(path)


def rank_part(shard: tuple[int, int] | None, env=os.environ) -> tuple[int, int] | None:
    """``--shard I/N`` combined with a torchrun rank (RANK / WORLD_SIZE): part I * W + R of N * W."""
    world = int(env.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return shard
    rank = int(env.get("RANK", "0") or 0)
    i, n = shard or (0, 1)
    return i * world + rank, n * world


# ---- reading ------------------------------------------------------------------------------------------------

class FeatureSet:
    """The conversations of a features folder (all its indexes): ``get(id)`` -> (ids, mask, aux, hidden)."""

    def __init__(self, folder: Path, spec: FeatureSpec | None = None):
        self.folder = folder
        indexes = check_folder(folder, spec) if spec is not None else read_indexes(folder)
        if not indexes:
            raise UserError(f"{folder}: no features index (index*.json); compute them with "
                            "'trtllm-spec data features RECIPE'")
        self.entries = {cid: e for idx in indexes.values() for cid, e in idx.get("conversations", {}).items()}

    def get(self, cid: str):
        from safetensors import safe_open

        e = self.entries.get(cid)
        if e is None:
            raise UserError(f"{self.folder}: conversation {cid!r} has no features; rerun 'trtllm-spec data features' "
                            "(it resumes) over the same conversations")
        k = e["key"]
        with safe_open(str(self.folder / e["shard"]), "pt") as f:
            names = set(f.keys())

            def get(name):
                return decode(f.get_tensor(f"{k}.{name}"),
                              f.get_tensor(f"{k}.{name}_scale") if f"{k}.{name}_scale" in names else None)

            return (f.get_tensor(f"{k}.input_ids").tolist(), f.get_tensor(f"{k}.assistant").tolist(),
                    get("aux"), get("hidden"))


# ---- the step ------------------------------------------------------------------------------------------------

def check_capture(recipe, layers: tuple[int, ...], target_dir: Path, cfg: dict | None = None) -> tuple[int, ...]:
    """The captured layers the caller passes (``drafters.registry.offline_capture``: the stage asks the descriptor,
    ``data`` does not), refused when there are none (the recipe trains without features) or one names a layer the
    target does not have. ``cfg``: the target's config.json when the caller has read it."""
    cfg = cfg if cfg is not None else json.loads((target_dir / "config.json").read_text())
    layers = tuple(layers)
    if not layers:
        raise UserError(f"drafter {recipe.drafter.type} with offline_features "
                        f"{getattr(recipe.drafter.training.data, 'offline_features', None)} trains without captured "
                        "target features; features are for offline EAGLE-3 (drafter.type: eagle3, "
                        "drafter.training.data.offline_features: true)")
    from trtllm_spec.core.shape import text_value

    n = text_value(cfg, "num_hidden_layers")
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise UserError(f"drafter.layers_to_capture {list(layers)}: layer {bad[0]} is outside the target's {n} layers "
                        f"(0..{n - 1})")
    return layers


def run_features(recipe, convs: list[dict], target_dir: Path, folder: Path, log: Callable[[str], None], *,
                 layers: tuple[int, ...], placement, features_dtype: str | None = None, batch_size: int | None = None,
                 shard: tuple[int, int] | None = None, device_map: str | None = None) -> FeaturesReport:
    """The features step (``data features``, and offline training in ``train`` / ``build``): the budget (printed;
    refused when the disk cannot hold it), a folder from another target or layer set refused, then the teacher-
    forced pass on ``placement`` (``runtime.device.choose``). ``shard`` / torchrun rank: this writer's slice."""
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.core.recipe_load import recipe_to_dict
    from trtllm_spec.data.budget import feature_budget, rate_key, record_rate
    from trtllm_spec.data.chat import load_tokenizer

    d = recipe.drafter.training.data
    cfg = json.loads((target_dir / "config.json").read_text())
    layers = check_capture(recipe, layers, target_dir, cfg)
    spec = spec_for(target_dir, recipe.target.model, layers, features_dtype or d.features_dtype)
    part = rank_part(shard)
    if part is not None:
        convs = convs[part[0]::part[1]]
    indexes = check_folder(folder, spec) if folder.is_dir() else {}
    done = {cid for idx in indexes.values() for cid in idx.get("conversations", {})}
    tok = load_tokenizer(target_dir, recipe.resolve_path(recipe.target.chat_template))
    seqs = sequences(convs, tok)
    key = rate_key("features", cfg, device=placement.device, dtype=placement.dtype)
    left = [c for c in seqs if c not in done]
    bud = feature_budget(len(seqs), len(left), sum(len(seqs[c][0]) for c in left), list(layers), spec.hidden_size,
                         spec.dtype, folder, key)
    for line in bud.lines():
        log(line)
    bud.check()
    if not left:
        return FeaturesReport(0, len(seqs), 0, 0.0, folder, placement.as_dict())
    if placement.device == "cuda" and os.environ.get("LOCAL_RANK") and device_map is None:
        import torch

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # one GPU per torchrun rank
    from trtllm_spec.data.regen_hf import HFEngine

    engine = HFEngine(target_dir, dtype=placement.dtype, device=placement.device, device_map=device_map)
    log(f"features: {placement.describe()}, layers {list(layers)}, {spec.dtype} into {folder}"
        + (f" (part {part[0]}/{part[1]})" if part else ""))
    started = time.perf_counter()

    def progress(n: int, total: int, toks: int) -> None:
        log(f"features: {n}/{total} conversations, {toks} tokens "
            f"({toks / max(1e-9, time.perf_counter() - started):.0f} tok/s)")

    prov = provenance(recipe_to_dict(recipe), [target_dir / "config.json"], {"placement": placement.as_dict()})
    rep = write_features(seqs, engine, folder, spec, batch_size=batch_size or d.regen_batch_size, part=part,
                         provenance=prov, progress=progress)
    rep.placement = placement.as_dict()
    record_rate(key, rep.tokens, rep.seconds)
    return rep
