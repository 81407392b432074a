"""``measure``: run the suite through the target alone and through the speculative decoder; build the profile.

Steps: check the inputs (cheap, before anything loads) -> suite and prompt ids -> load target and drafter ->
greedy on our decoder: every prompt's target-only reference in batches (``batched_references``) -> per prompt,
``speculative_generate`` (timed), target-only ``generate`` timed alone on one prompt per category (on every
prompt when sampling or on the transformers engine), and for block drafters one more decode per swept draft
length -> ``build_profile``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError
from trtllm_spec.measure.profile import PromptRun, acceptance_kind, build_profile, requested_drafts

DTYPES = ("fp32", "bf16", "auto")
WARMUP_TOKENS = 4


@dataclass(frozen=True)
class DrafterInfo:
    kind: str  # ngram | eagle3 | dflash | dspark | draft_model
    path: Path | None
    config: dict
    max_draft_len: int | None


def check_settings(draft_len: int, max_new_tokens: int, temperature: float, dtype: str,
                   block_sweep: Sequence[int] | None = None) -> None:
    if draft_len < 1:
        raise UserError(f"--draft-len {draft_len}: must be at least 1 (D = 0 is the target alone)")
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens {max_new_tokens}: must be at least 1")
    if not temperature >= 0:
        raise UserError(f"--temperature {temperature}: must be >= 0 (0 = greedy)")
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    bad = [d for d in block_sweep or () if not 1 <= d <= draft_len]
    if bad:
        raise UserError(f"--block-sweep {bad[0]}: swept draft lengths must be in 1..{draft_len} (--draft-len)")


def target_checkpoint(spec: str | Path) -> tuple[Path, dict]:
    """(HF folder with weights, its config.json) for a path or fetched asset; presets hold no weights."""
    from trtllm_spec.core.targets import resolve_target

    t = resolve_target(str(spec))
    if t.path is None or not t.path.is_dir():
        raise UserError(f"measure needs the target's weights, but {spec!r} is a shape preset or a lone config.json; "
                        "give a checkpoint folder, or fetch one ('trtllm-spec assets fetch smollm2-135m')")
    if not any(t.path.glob("*.safetensors")):
        raise UserError(f"target {t.path} has no *.safetensors weights; measure needs the full checkpoint")
    return t.path, t.config


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise UserError(f"drafter folder {folder} has no config.json; give an exported drafter folder "
                        "(EAGLE-3, DFlash/DSpark), a draft model checkpoint, or 'ngram' / 'suffix'")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); re-export the drafter") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path} must hold a JSON object")
    return cfg


def inspect_drafter(spec: str, target_cfg: dict, draft_len: int) -> DrafterInfo:
    """Kind, target match and D limit from the drafter's config.json alone (before any weights load)."""
    from trtllm_spec.drafters.registry import folderless

    if spec in folderless():  # a mechanism the reference decoder builds from options (see load.py)
        return DrafterInfo(spec, None, {}, None)
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        raise UserError(f"--drafter {spec!r} is neither {' nor '.join(repr(n) for n in folderless())} nor an "
                        "existing folder")
    from trtllm_spec.drafters.load import folder_kind

    cfg, kind = _read_config(folder), folder_kind(folder)
    t_h, t_v = target_cfg.get("hidden_size"), target_cfg.get("vocab_size")
    from trtllm_spec.drafters.registry import get

    checks = [("vocab_size", t_v)] + ([("hidden_size", t_h)] if get(kind).shares_target_hidden else [])
    for key, want in checks:
        if cfg.get(key) != want:
            raise UserError(f"drafter {folder} has {key} {cfg.get(key)}, the target {want}: it was made for "
                            "another target (measure it with the target it was trained for)")
    limit = get(kind).draft_limit(cfg, f"{folder}/config.json")
    max_d = limit[0] if limit else None
    if limit is not None and draft_len > max_d:
        raise UserError(f"--draft-len {draft_len} exceeds what this {kind} drafter supports: {limit[1]} = "
                        f"{max_d} (from {folder}/config.json); choose D <= {max_d}")
    return DrafterInfo(kind, folder, cfg, max_d)


def machine_info(torch, device: str = "cpu") -> dict:
    info = {"platform": platform.platform(terse=True), "machine": platform.machine(),
            "processor": platform.processor() or None, "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "device": device}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def _eos_ids(model, tok) -> tuple[int, ...]:
    ids = list(model.cfg.eos_token_ids)
    if getattr(tok, "eos_token_id", None) is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    return tuple(ids)


def suite_prompts(target_path, suite, categories, num_prompts: int, seed: int, suite_check, chat_template,
                  max_new_tokens: int, draft_len: int, max_positions: int | None, template_kwargs: dict | None = None):
    """The suite's prompts as the target's token ids (its chat template), every engine the same: (items, suite
    provenance, the overlap check's record, tokenizer, prompt ids); refused when none is selected or one does not
    fit the context."""
    from trtllm_spec.data.chat import check_template_kwargs, load_tokenizer, prompt_ids
    from trtllm_spec.data.user_suite import check_context, select_suite

    items, suite_prov = select_suite(suite, categories, num_prompts, seed)
    if not items:
        raise UserError(f"suite {suite!r} gave no prompts for categories {categories}")
    overlap = suite_check(items) if suite_check else None
    tok = load_tokenizer(target_path, chat_template)
    check_template_kwargs(tok, template_kwargs)  # an argument the template ignores is refused, before any decode
    items, suite_prov = mode_items(items, tok, categories, suite_prov)
    prompts = [prompt_ids(tok, it.messages, {**(template_kwargs or {}), **(getattr(it, "template_kwargs", None)
                                                                          or {})}) for it in items]
    check_context(items, prompts, max_new_tokens, max_positions, draft_len)
    return items, suite_prov, overlap, tok, prompts


def mode_items(items: list, tok, categories, suite_prov: dict) -> tuple[list, dict]:
    """Suite items with their own chat-template arguments (speed-lite-modes' thinking pair) checked against the
    template: chosen explicitly, one it does not read is refused; by default (no --categories) the pair is left
    out for such a template and the profile's suite record says why."""
    from trtllm_spec.data.chat import check_template_kwargs

    if categories is None and any(getattr(it, "template_kwargs", None) for it in items):
        from trtllm_spec.data.chat import template_variables
        from trtllm_spec.data.mode_suite import default_categories

        keep = set(default_categories(template_variables(tok)))
        dropped = sorted({it.category for it in items if it.category not in keep})
        items = [it for it in items if it.category in keep]
        if dropped:
            suite_prov = {**suite_prov, "skipped_categories": {c: "the chat template does not read enable_thinking"
                                                               for c in dropped}}
    for it in items:
        check_template_kwargs(tok, getattr(it, "template_kwargs", None))
    return items, suite_prov


def measure(target_dir: str | Path, drafter_spec: str, draft_len: int, *, suite: str = SUITE_NAME,
            categories: Sequence[str] | None = None, num_prompts: int = 10, max_new_tokens: int = 128,
            temperature: float = 0.0, dtype: str = "fp32", seed: int = 0, chat_template: str | Path | None = None,
            progress: Callable[[str], None] | None = None, block_sweep: Sequence[int] | None = None,
            device: str = "auto", suite_check: Callable[[list], dict] | None = None,
            reference_engine: str = "auto", drafter_options: dict | None = None, runs_out: list | None = None,
            request_mode=None) -> dict:
    """Measure acceptance of ``drafter_spec`` ('ngram' or a folder) against ``target_dir`` on the suite with
    the PyTorch reference decoder (on ``device``: auto = CUDA when visible); returns the speculation profile
    (see measure/profile.py). ``suite`` is 'speed-lite' or a suite file/folder (data/user_suite.py);
    ``suite_check(items)`` runs before any model loads (the overlap check) and its record joins the profile.
    ``reference_engine``: ours | hf | auto (runtime/targets.py: ours for the Llama family, transformers else).
    ``drafter_options``: the descriptor's ``runtime_options`` (a folderless drafter's settings, ``sa_enhancer``).
    Prompts run in suite order and each finished one is handed to ``Drafter.end_request`` (the suffix
    automaton's global pool), so a result never depends on batching.
    ``runs_out``: a list that receives the per-prompt ``PromptRun`` records as they are measured (their token ids:
    another engine's outputs are compared with them, measure/engine_compare.py).
    Steps: inputs checked and prompts built (nothing loaded) -> target and drafter loaded -> ``_Decoding``: warm-up,
    batched references, then per prompt ``prompt_run`` -> the profile."""
    log = progress or (lambda _m: None)
    mode = resolve_mode(request_mode, temperature)
    temperature = mode.temperature
    check_settings(draft_len, max_new_tokens, temperature, dtype, block_sweep)
    from trtllm_spec.runtime.targets import load_target, resolve_reference_engine

    if isinstance(categories, str):
        categories = [c for c in categories.replace(" ", "").split(",") if c]
    target_path, target_cfg = target_checkpoint(target_dir)
    info = inspect_drafter(drafter_spec, target_cfg, draft_len)
    resolve_reference_engine(reference_engine, target_cfg, str(target_path / "config.json"))  # before any load
    items, suite_prov, overlap, tok, prompts = suite_prompts(
        target_path, suite, categories, num_prompts, seed, suite_check, chat_template, max_new_tokens, draft_len,
        target_cfg.get("max_position_embeddings"), mode.chat_template_kwargs)

    import torch

    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.device import choose
    from trtllm_spec.runtime.sampling import SamplingParams

    where = choose(device, dtype, torch)
    log(f"loading {target_path} ({where.describe()}) and the {info.kind} drafter")
    engine, target = load_target(target_path, target_cfg, reference_engine, where.torch_dtype(torch), where.device)
    max_len = max(len(p) for p in prompts) + max_new_tokens + draft_len + 8
    kind, drafter = load_runtime_drafter(drafter_spec, target, options=drafter_options, max_len=max_len)
    limit = getattr(drafter, "max_draft_len", None)
    if limit is not None and draft_len > limit:
        raise UserError(f"--draft-len {draft_len} exceeds what this {kind} drafter supports ({limit})")
    eos = _eos_ids(target, tok)
    grammars: dict[str, object] = {}
    constraints = [grammar(tok, target, item_mode(mode, it), eos, grammars) for it in items]
    dec = _Decoding(target, drafter, draft_len, max_new_tokens, SamplingParams(temperature=temperature,
                                                                                 top_p=mode.top_p),
                    eos, sorted(set(block_sweep or ()) - {draft_len}) if acceptance_kind(kind) == "block" else [],
                    seed, where.device)
    dec.warm_up(prompts[0][-8:])
    batched = dec.params.greedy and engine == "ours" and all(c is None for c in constraints)
    timed = _timed_prompts(items, batched)
    refs = dec.batched_references(prompts, timed, log)
    runs: list[PromptRun] = runs_out if runs_out is not None else []
    greedy_al: list[tuple[str, int, int]] = []
    rechecked = 0
    for i, (item, ids) in enumerate(zip(items, prompts, strict=True)):
        log(f"[{i + 1}/{len(items)}] {item.id} ({len(ids)} prompt tokens)")
        run, again = dec.prompt_run(i, item, ids, refs.get(i), constraints[i], greedy_al)
        runs.append(run)
        rechecked += again
    profile = build_profile(
        runs, engine="pytorch",
        drafter={"type": kind, "path": str(info.path.resolve()) if info.path else None, "draft_len": draft_len,
                 "max_draft_len": limit if limit is not None else info.max_draft_len,
                 **({"options": drafter_options} if drafter_options else {}),
                 **({"block_sweep": [*dec.sweep, draft_len]} if acceptance_kind(kind) == "block" else {})},
        target=target_summary(target_dir, target_path, target_cfg),
        suite={**suite_prov, "seed": seed, "num_prompts_per_category": num_prompts,
               "item_ids": [it.id for it in items], **({"overlap": overlap} if overlap else {})},
        settings={"dtype": where.dtype, "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
                  "eos_token_ids": list(eos), "chat_template": str(chat_template) if chat_template else "checkpoint",
                  "machine": machine_info(torch, where.device), "placement": where.as_dict(),
                  "reference_engine": engine,
                  "reference": {"outputs": "batched" if batched else "per_prompt", "timed_prompts": len(timed),
                                "rechecked_at_batch_1": rechecked},
                  "request_mode": mode.as_dict()},
    )
    if greedy_al:
        add_greedy_comparison(profile, greedy_al)
    if any(c is not None for c in constraints):
        profile["structured_output"] = check_outputs(tok, runs, [item_mode(mode, it) for it in items])
    return profile


def _timed_prompts(items: Sequence, batched: bool) -> set[int]:
    """The prompts whose target-only decode is timed alone: with batched references one per category (the first),
    else every prompt."""
    if not batched:
        return set(range(len(items)))
    first: dict[str, int] = {}
    for i, it in enumerate(items):
        first.setdefault(it.category, i)
    return set(first.values())


@dataclass
class _Decoding:
    """What every prompt of one measurement decodes with, and the decodes ``measure`` runs per prompt."""

    target: object
    drafter: object
    draft_len: int
    max_new_tokens: int
    params: object  # runtime.sampling.SamplingParams of the request mode
    eos: tuple[int, ...]
    sweep: list[int]  # block drafters: further draft lengths decoded per prompt
    seed: int
    device: object

    def gen(self, i: int):
        import torch

        return torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + i)

    def warm_up(self, ids: list[int]) -> None:
        """First calls pay one-off costs (allocations, kernels); keep them out of the timing."""
        from trtllm_spec.runtime.decoder import speculative_generate
        from trtllm_spec.runtime.generate import generate

        generate(self.target, ids, WARMUP_TOKENS, self.eos, self.params, self.gen(0))
        speculative_generate(self.target, self.drafter, ids, WARMUP_TOKENS, self.draft_len, self.params, self.eos,
                             self.gen(0))

    def batched_references(self, prompts: list[list[int]], timed: set[int], log) -> dict[int, list[int]]:
        """Target-only greedy outputs of the prompts not timed alone, decoded in batches."""
        rest = [i for i in range(len(prompts)) if i not in timed]
        if not rest:
            return {}
        outs = batched_references(self.target, [prompts[i] for i in rest], self.max_new_tokens, self.eos, log)
        return dict(zip(rest, outs, strict=True))

    def prompt_run(self, i: int, item, ids: list[int], ref: list[int] | None, constraint,
                   greedy_al: list) -> tuple[PromptRun, int]:
        """One prompt: target alone (timed, unless ``ref`` came from the batched pass), speculative (timed), the
        block sweep, the greedy AL beside a sampled mode (appended to ``greedy_al``), then the drafter's
        ``end_request``. Returns the run and 1 where a batched reference was decoded again at batch 1."""
        from trtllm_spec.runtime.decoder import speculative_generate
        from trtllm_spec.runtime.generate import generate
        from trtllm_spec.runtime.sampling import SamplingParams

        t_target = None
        if ref is None:
            ref, t_target = _timed(generate, self.target, ids, self.max_new_tokens, self.eos, self.params,
                                   self.gen(i), constraint)
        (out, st), t_spec = _timed(speculative_generate, self.target, self.drafter, ids, self.max_new_tokens,
                                   self.draft_len, self.params, self.eos, self.gen(i), constraint)
        rechecked = 0
        if t_target is None and out != ref:  # a batched reference can differ by rounding: plain decoding decides
            ref, rechecked = generate(self.target, ids, self.max_new_tokens, self.eos, self.params, self.gen(i)), 1
        run = PromptRun(item.id, item.category, len(ids), ref, out, t_target, t_spec, list(st.accepted),
                        list(st.proposed), requested_drafts(st.accepted, self.draft_len, self.max_new_tokens),
                        st.draft_s, st.verify_s, st.prefill_s, sources=list(st.sources),
                        enhancer_s=float(getattr(self.drafter, "sa_s", 0.0)))
        for d in self.sweep:
            _, sd = speculative_generate(self.target, self.drafter, ids, self.max_new_tokens, d, self.params,
                                         self.eos, self.gen(i), constraint)
            run.sweep[d] = (sum(sd.accepted) + sd.iterations, sd.iterations)
        if not self.params.greedy:  # the mode samples: greedy AL of the same prompt beside the sampled one
            _, sg = speculative_generate(self.target, self.drafter, ids, self.max_new_tokens, self.draft_len,
                                         SamplingParams(), self.eos, self.gen(i), constraint)
            greedy_al.append((item.category, sum(sg.accepted) + sg.iterations, sg.iterations))
        end_request = getattr(self.drafter, "end_request", None)  # the suffix automaton's pool takes the finished text
        if end_request is not None:
            end_request(ids, out)  # after the sweep: a prompt never matches its own finished text
        return run, rechecked


def item_mode(mode, item):
    """The request mode of one suite item: the run's, with the item's own overrides (speed-lite-modes:
    data/mode_suite.py) on top."""
    kw, fmt = getattr(item, "template_kwargs", None), getattr(item, "response_format", None)
    if not kw and fmt is None:
        return mode
    return mode.model_copy(update={"chat_template_kwargs": {**mode.chat_template_kwargs, **(kw or {})},
                                   "response_format": fmt if fmt is not None else mode.response_format})


def resolve_mode(request_mode, temperature: float):
    """The request mode a measurement runs: the given one (its temperature must agree with ``temperature`` when
    that is set), else the default mode at ``temperature``."""
    from trtllm_spec.core.request_mode import RequestMode

    if request_mode is None:
        return RequestMode(temperature=temperature)
    if temperature and temperature != request_mode.temperature:
        raise UserError(f"temperature {temperature} and the request mode's temperature {request_mode.temperature} "
                        "differ; give one (workload.request_mode.temperature / --temperature)")
    return request_mode


def grammar(tok, target, mode, eos: tuple[int, ...], cache: dict | None = None):
    """The mode's structured-output constraint compiled for the target's tokenizer (xgrammar), or None; ``cache``
    (schema text -> compiled) compiles each schema once."""
    schema = mode.json_schema()
    if schema is None:
        return None
    from trtllm_spec.runtime.constraint import GrammarConstraint

    key = json.dumps(schema, sort_keys=True)
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = GrammarConstraint.from_schema(tok, int(target.cfg.vocab_size), schema, eos)
    return cache[key]


def add_greedy_comparison(profile: dict, greedy: list[tuple[str, int, int]]) -> None:
    """A sampling mode's profile also gets the greedy AL of the same prompts and drafter (``greedy_comparison``),
    overall and per category: the two side by side show what sampling costs in acceptance."""
    def al(rows) -> float:
        return round(sum(t for _, t, _ in rows) / max(1, sum(n for _, _, n in rows)), 6)

    cats = sorted({c for c, _, _ in greedy})
    profile["greedy_comparison"] = {
        "temperature": profile["settings"]["temperature"], "num_prompts": len(greedy),
        "overall": {"greedy": al(greedy), "sampled": profile["overall"]["mean_acceptance_length"]},
        "categories": {c: {"greedy": al([r for r in greedy if r[0] == c]),
                           "sampled": profile["categories"][c]["mean_acceptance_length"]}
                       for c in cats if c in profile.get("categories", {})}}


def check_outputs(tok, runs, modes) -> dict:
    """Every output under a JSON schema decoded to text, parsed and validated (``jsonschema``): counts over the
    speculative outputs and the target-only references. ``modes``: one request mode, or one per run."""
    import jsonschema

    modes = modes if isinstance(modes, list) else [modes] * len(runs)
    counts = {"parsed": 0, "valid": 0, "truncated": 0, "num_outputs": 0}
    for r, mode in zip(runs, modes, strict=True):
        schema = mode.json_schema()
        if schema is None:
            continue
        checker = jsonschema.validators.validator_for(schema)(schema)
        for toks in (r.output, r.reference):
            counts["num_outputs"] += 1
            text = tok.decode(toks, skip_special_tokens=True)
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                counts["truncated"] += 1  # max_new_tokens ended it before the JSON value closed
                continue
            counts["parsed"] += 1
            counts["valid"] += int(checker.is_valid(value))
    return counts


REFERENCE_BATCH = 16  # rows per batch at most
REFERENCE_TOKENS = 4096  # rows x the longest prompt of the batch at most: a long prompt is not padded into a batch


def batched_references(target, prompts: list[list[int]], max_new_tokens: int, eos: tuple[int, ...],
                       log: Callable[[str], None]) -> list[list[int]]:
    """Greedy target-only outputs of every prompt, decoded in left-padded batches of similar length (our decoder's
    ``generate_batch``, as regeneration runs it): the reference each speculative run must reproduce, at a fraction
    of one-prompt-at-a-time decoding (on the 2-core CPU the 44 x 64-token suite's plain decoding took ~165 s of a
    ~460 s measure stage, almost all of it 2,816 batch-1 steps). Rows are compared token for token with the
    speculative output; a row whose rounding at batch > 1 flips a near-tie is decoded again alone (``measure``),
    so a difference that remains is the decoder's. Plain decoding is still timed alone on one prompt per category
    for the speedup on this machine."""
    from trtllm_spec.runtime.generate import generate_batch

    out: dict[int, list[int]] = {}
    for chunk in length_buckets([len(p) for p in prompts], REFERENCE_BATCH, REFERENCE_TOKENS):
        width = max(len(prompts[i]) for i in chunk)
        log(f"reference: plain greedy decoding of {len(chunk)} prompt(s) of <= {width} tokens in one batch")
        for i, toks in zip(chunk, generate_batch(target, [prompts[i] for i in chunk], max_new_tokens, eos),
                           strict=True):
            out[i] = toks
    return [out[i] for i in range(len(prompts))]


def length_buckets(lengths: list[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped shortest first so that each group holds at most ``max_rows`` rows and rows x its longest
    length stays within ``max_tokens`` (a prompt longer than that goes alone): little padding, bounded memory."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        g = groups[-1] if groups else None
        if g is None or len(g) >= max_rows or (len(g) + 1) * lengths[i] > max_tokens:
            groups.append([i])
        else:
            g.append(i)
    return groups


def target_summary(spec: str | Path, path: Path, cfg: dict) -> dict:
    asset = path / "asset.json"
    hf_id = json.loads(asset.read_text()).get("hf_id") if asset.is_file() else cfg.get("_name_or_path")
    return {"spec": str(spec), "path": str(path.resolve()), "hf_id": hf_id, "model_type": cfg.get("model_type"),
            "num_layers": cfg.get("num_hidden_layers"), "hidden_size": cfg.get("hidden_size"),
            "vocab_size": cfg.get("vocab_size")}
