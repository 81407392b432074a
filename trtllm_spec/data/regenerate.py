"""``data regenerate``: the target writes the assistant turns itself (drafters trained on the target's own
outputs accept more). Batched, resumable (appends to a JSONL file and skips ids already there), and an
interruption loses at most the batch in flight.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import UserError


@dataclass
class RegenReport:
    done: int
    skipped: int
    generated_tokens: int
    seconds: float
    placement: dict | None = None  # the device and precision used (runtime.device.Placement.as_dict)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


def read_done(path: Path) -> dict[str, dict]:
    """Records already written (a torn last line from a killed run is ignored and rewritten)."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "id" in rec:
                done[rec["id"]] = rec
    return done


def read_conversations(path: Path, what: str) -> list[dict]:
    """The conversations of ``path`` (``read_done``), each one's ``messages`` checked: a record of the wrong shape
    is refused naming ``what`` (the file's flag or field), the file, the id and what is wrong."""
    from trtllm_spec.data.chat import message_problem
    from trtllm_spec.errors import UserError

    convs = list(read_done(path).values())
    for c in convs:
        if "tokens" in c and "assistant" in c:
            continue  # regeneration's exact tokens: the messages are not re-rendered
        problem = message_problem(c.get("messages"))
        if problem:
            raise UserError(f"{what} {path}: conversation {str(c['id'])[:60]!r}: {problem}; each line must be "
                            '{"id": ..., "messages": [{"role": "user", "content": "..."}, {"role": "assistant", '
                            '"content": "..."}]}')
    return convs


def check_output_file(path: Path, what: str) -> None:
    """``path`` can be written as a file: it is not a folder and no existing part of its parent is a file."""
    from trtllm_spec.errors import UserError

    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give a file path (e.g. {path / 'conversations.jsonl'})")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{what} {path}: {parent} is a file, not a folder; choose another path")
            break


def rewrite_clean(path: Path, done: dict[str, dict]) -> None:
    """Drop a torn tail so appends start on a clean line."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        path.write_text("".join(json.dumps(r) + "\n" for r in done.values()), encoding="utf-8")


def regenerate(items: list, target_dir: Path, out: Path, *, max_new_tokens: int, batch_size: int,
               temperature: float = 0.0, seed: int = 0, dtype: str = "auto", chat_template: Path | None = None,
               progress: Callable[[int, int, int], None] | None = None, engine=None,
               device: str = "auto", features=None, template_kwargs: dict | None = None) -> RegenReport:
    """Answer every user turn of ``items`` (SuiteItem-like: ``id``, ``messages``, ``source``) with the target.

    Single-turn records also keep the exact token ids (prompt + reply) and an assistant mask: the features step
    (``data/features``, offline EAGLE-3 training) reads the target over exactly those tokens. ``features`` (a
    ``data.features.FeatureWriter``): our decoder keeps the target's states at the captured layers while it decodes
    single-turn batches (computed anyway, so nearly free; a separate prefill pass costs ~0.6-0.75x the
    regeneration on a 2-core CPU, ``benchmarks/decisions/features_step.md``) and writes them after the batch's JSONL lines;
    what it does not cover (multi-turn, another engine) the features step captures. ``engine``: another
    decoder with ``eos`` and ``generate_batch(prompts, max_new_tokens, params, gen)`` (the
    transformers backend, ``data/regen_hf.HFEngine``); default our Llama-family decoder. ``device`` / ``dtype``:
    ``runtime.device.choose``'s rule (auto: CUDA when visible; bf16 where the device runs it fast)."""
    import torch

    from trtllm_spec.data.chat import check_template_kwargs, load_tokenizer, prompt_ids
    from trtllm_spec.runtime.device import choose
    from trtllm_spec.runtime.generate import generate_batch
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.runtime.sampling import SamplingParams

    tok = load_tokenizer(target_dir, chat_template)
    check_template_kwargs(tok, template_kwargs)  # the request mode's switch: trained in the mode it serves
    placement = choose(device, dtype, torch)
    if engine is None:
        model = LlamaModel.from_pretrained(target_dir, dtype=placement.torch_dtype(torch), device=placement.device)
        eos = tuple(model.cfg.eos_token_ids)
    else:
        model, eos = None, tuple(engine.eos)
    eos = eos or ((tok.eos_token_id,) if tok.eos_token_id is not None else ())
    if not eos:
        raise UserError(f"{target_dir}: neither config.json nor the tokenizer names an EOS token")
    out.parent.mkdir(parents=True, exist_ok=True)
    done = read_done(out)
    rewrite_clean(out, done)
    todo = [it for it in items if it.id not in done]
    params = SamplingParams(temperature=temperature)
    gen = torch.Generator(device=placement.device).manual_seed(seed)
    started, tokens = time.perf_counter(), 0
    # group by prompt length (in tokens) so a batch pads little
    lengths = {it.id: len(prompt_ids(tok, [{"role": "user", "content": _users(it)[0]}], template_kwargs))
               for it in todo}
    todo.sort(key=lambda it: lengths[it.id])
    with open(out, "a", encoding="utf-8") as f:
        for b in range(0, len(todo), batch_size):
            batch = todo[b:b + batch_size]
            convs = [[] for _ in batch]
            extra: list[dict] = [{} for _ in batch]
            feats: list[dict] = []
            depth = max(sum(1 for m in it.messages if m["role"] == "user") for it in batch)
            for turn in range(depth):
                active = [i for i, it in enumerate(batch) if turn < len(_users(it))]
                for i in active:
                    convs[i].append({"role": "user", "content": _users(batch[i])[turn]})
                prompts = [prompt_ids(tok, convs[i], template_kwargs) for i in active]
                single = depth == 1
                keep = features is not None and engine is None and single
                run = generate_batch if engine is None else (lambda _m, *a, **k: engine.generate_batch(*a, **k))
                replies = run(model, prompts, max_new_tokens, eos, params, gen,
                              **({"capture": features.spec.layers, "features": feats} if keep else {}))
                for i, p, r in zip(active, prompts, replies, strict=True):
                    tokens += len(r)
                    text = tok.decode([t for t in r if t not in eos], skip_special_tokens=True)
                    convs[i].append({"role": "assistant", "content": text})
                    if single:
                        extra[i] = {"tokens": p + r, "assistant": [0] * len(p) + [1] * len(r)}
            for it, conv, e in zip(batch, convs, extra, strict=True):
                mode = {"chat_template_kwargs": dict(template_kwargs)} if template_kwargs else {}
                f.write(json.dumps({"id": it.id, "source": getattr(it, "source", ""), "messages": conv, **mode,
                                    **e}) + "\n")
            f.flush()
            if feats:  # after the lines: a kill in between leaves these ids to the features step
                features.add([it.id for it in batch], [(e["tokens"], e["assistant"]) for e in extra], feats)
            if progress:
                progress(len(done) + b + len(batch), len(items), tokens)
    return RegenReport(done=len(todo), skipped=len(items) - len(todo), generated_tokens=tokens,
                       seconds=time.perf_counter() - started, placement=placement.as_dict())


def _users(item) -> list[str]:
    return [m["content"] for m in item.messages if m["role"] == "user"]
