"""Which engine writes the training replies, and the budget printed (and enforced) before it starts.

``ours``: the in-process Llama-family decoder (``runtime/llama``); ``hf``: transformers on the chosen device, any
architecture it loads (``data/regen_hf``); ``openai``: OpenAI-compatible chat-completions servers
(``data/regen_openai``). ``auto`` picks ``ours`` for the families our decoder runs and ``hf`` for the rest.
Every run records its measured tokens/s (``data/budget``) so the next budget predicts times on this machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trtllm_spec.errors import UserError

BACKENDS = ("auto", "ours", "hf", "openai")


def resolve_backend(name: str, cfg: dict) -> str:
    if name not in BACKENDS:
        raise UserError(f"regeneration backend {name!r}: choose one of {', '.join(BACKENDS)}")
    from trtllm_spec.runtime.llama import SUPPORTED

    mt = cfg.get("model_type")
    if name == "ours" and mt not in SUPPORTED:
        raise UserError(f"regen_backend ours: our decoder runs {', '.join(SUPPORTED)} models, not {mt!r}; use "
                        "--backend hf (transformers, any architecture) or openai (a server)")
    if name != "auto":
        return name
    return "ours" if mt in SUPPORTED else "hf"


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``I/N`` -> (I, N) with 0 <= I < N."""
    if value is None:
        return None
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise UserError(f"--shard {value!r}: give I/N with integers, e.g. --shard 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise UserError(f"--shard {value}: needs 0 <= I < N (shards are numbered 0..N-1), e.g. --shard {n - 1}/{n}"
                        if n >= 1 else f"--shard {value}: N must be at least 1")
    return i, n


def server_overrides(backend: str | None, urls: tuple[str, ...], concurrency: int | None,
                     timeout_s: float | None) -> list[str]:
    """``data regenerate``'s flags as recipe overrides (validated by the recipe like any ``--set``)."""
    import json

    pre = "drafter.training.data."
    if urls and backend not in (None, "openai"):
        raise UserError(f"--server-url goes with the openai backend, not --backend {backend}")
    out = []
    if backend or urls:
        out.append(f"{pre}regen_backend={backend or 'openai'}")
    if urls:
        out.append(f"{pre}server.urls={json.dumps(list(urls))}")
    if concurrency is not None:
        out.append(f"{pre}server.concurrency={concurrency}")
    if timeout_s is not None:
        out.append(f"{pre}server.timeout_s={timeout_s}")
    return out


def estimate_recipe(recipe, data_dir: Path, device: str = "cpu", dtype: str = "bf16", *, target=None,
                    capture: tuple[int, ...] = ()):
    """``train --estimate``: the budget of the recipe's data stage without starting it (a preset target works).
    ``target``: ``data_target``'s answer when the caller has it; ``capture``: the layers offline training captures
    (``drafters.registry.offline_capture``, asked by the stage: ``data`` reads no descriptor)."""
    from trtllm_spec.data.regenerate import read_done

    target = target or data_target(recipe.target.model, recipe.base_dir)
    backend = resolve_backend(recipe.drafter.training.data.regen_backend, target.config)
    out = data_dir / "conversations.jsonl"
    done = len(read_done(out)) if out.is_file() else 0
    return budget_for(recipe, target, data_dir, backend=backend, device=device, dtype=dtype, done=done,
                      capture=tuple(capture))


def budget_for(recipe, target, data_dir: Path, *, backend: str, device: str = "cpu", dtype: str = "bf16",
               done: int = 0, capture: tuple[int, ...] = ()):
    from trtllm_spec.data.budget import estimate

    gpu = recipe.hardware.gpu if device != "cpu" else None
    return estimate(recipe, target, data_dir, backend=backend, device=device, dtype=dtype, done=done,
                    capture=capture, gpu=gpu)


def run_regeneration(recipe, items: list, target_dir: Path, out: Path, log: Callable[[str], None], *,
                     capture: tuple[int, ...] = (), device: str = "cpu", dtype: str = "fp32",
                     shard: tuple[int, int] | None = None):
    """Budget (printed; refused when it cannot fit), then the recipe's backend over ``items`` into ``out``.
    ``capture``: the layers offline training needs, counted in the budget; our decoder keeps them while it decodes
    (``features/`` next to ``out``, as the ``shard``-th writer), the features step (``data/features``) the rest.
    ``device`` / ``dtype``: already resolved by ``runtime.device.choose`` (the in-process backends run there)."""
    from trtllm_spec.data.budget import rate_key, record_rate
    from trtllm_spec.data.regenerate import read_done

    d = recipe.drafter.training.data
    target = _target_for_budget(target_dir)
    backend = resolve_backend(d.regen_backend, target.config)
    ids = {it.id for it in items}
    done = sum(1 for k in read_done(out) if k in ids) if out.is_file() else 0
    bud = budget_for(recipe, target, out.parent, backend=backend, device=device, dtype=dtype, done=done,
                     capture=capture)
    for line in bud.lines():
        log(line)
    bud.check()
    chat_template = recipe.resolve_path(recipe.target.chat_template)
    progress = _progress(log)
    from trtllm_spec.core.request_mode import recipe_mode

    common = dict(max_new_tokens=d.regen_max_new_tokens, temperature=0.0, seed=d.seed, chat_template=chat_template,
                  progress=progress, template_kwargs=recipe_mode(recipe).chat_template_kwargs or None)
    if backend == "openai":
        from trtllm_spec.data.regen_openai import regenerate_openai

        rep = regenerate_openai(items, target_dir, out, d.server, log=log, **common)
    else:
        from trtllm_spec.data.regenerate import regenerate

        engine = None
        if backend == "hf":
            from trtllm_spec.data.regen_hf import HFEngine

            engine = HFEngine(target_dir, dtype=dtype, device=device)
        writer = None
        if capture and backend == "ours":  # our decoder keeps the captured states while it decodes
            from trtllm_spec.data.features import FeatureWriter, spec_for

            writer = FeatureWriter(out.parent / "features", spec_for(target_dir, recipe.target.model, capture,
                                                                     d.features_dtype), part=shard)
        rep = regenerate(items, target_dir, out, batch_size=d.regen_batch_size, dtype=dtype, device=device,
                         engine=engine, features=writer, **common)
    record_rate(rate_key("regen", target.config, backend=backend, device=device, dtype=dtype,
                         batch=d.regen_batch_size), rep.generated_tokens, rep.seconds)
    return rep


def data_target(spec: str, base_dir: Path | None = None):
    """The target with its planner shape when the planner reads its config, else (a checkpoint folder the planner
    cannot price) its config alone, ``shape`` None: regeneration, features and training need no planner shape."""
    from trtllm_spec.core.shape import load_config_json
    from trtllm_spec.core.targets import ResolvedTarget, resolve_target
    from trtllm_spec.errors import ShapeError

    try:
        return resolve_target(spec, base_dir)
    except ShapeError:
        p = Path(spec).expanduser()
        p = p if p.is_absolute() or base_dir is None or p.exists() else base_dir / p
        if not p.is_dir():
            raise
        cfg, _ = load_config_json(p)
        return ResolvedTarget(spec, "path", None, p, cfg.get("_name_or_path"), cfg)


def _target_for_budget(target_dir: Path):
    return data_target(str(target_dir))


def _progress(log: Callable[[str], None]) -> Callable[[int, int, int], None]:
    started = time.perf_counter()

    def report(n: int, total: int, toks: int) -> None:
        dt = max(1e-9, time.perf_counter() - started)
        log(f"regenerate: {n}/{total} conversations, {toks} tokens ({toks / dt:.0f} tok/s)")

    return report
