"""The ``speed-lite`` measurement suite and the training prompts, split so that they never overlap.

``speed-lite`` covers SPEED-Bench's eleven categories with prompts from the wheels in ``prompt_sources``:

=================  ============================================================================================
category           prompt
=================  ============================================================================================
coding             HumanEval: "Complete this Python function" + the stub
humanities, stem,  MT-Bench first turn of that category (10 questions each)
reasoning,
roleplay
math               MMATH, English, with "put your final answer within \\boxed{}"
multilingual       alternately MMATH in the nine other languages and dataset-build passages in 37 languages
                   (summarise, writing in that language)
qa                 SQuAD 2.0: the passage and a question about it
rag                HotpotQA: the question over its 10 paragraphs (supporting ones first; distractors are
                   dropped from the end when over ``max_prompt_chars``)
summarization      dataset-build English passages (1,500-4,000 characters)
writing            WritingBench English requests that fit ``max_prompt_chars``
=================  ============================================================================================

The split: each prompt's group (its id; all translations of an MMATH problem; all questions on one SQuAD
passage) goes to the eval pool when ``sha256("<source>:<group>")`` falls below the source's
``eval_fraction`` (30%; MT-Bench 100%), else to the train pool. The suite draws only from the eval pool and
``training_conversations`` only from the train pool, so they cannot overlap whatever N and seed.

Messages are plain ``{"role": "user", "content": ...}`` dicts; the caller applies the chat template.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.data.prompt_sources import SOURCES, Prompt, get_source, truncate_text
from trtllm_spec.data.prompts import load_prompts
from trtllm_spec.errors import UserError

SUITE_CATEGORIES = ("coding", "humanities", "math", "multilingual", "qa", "rag", "reasoning", "roleplay", "stem",
                    "summarization", "writing")
MIN_CONTEXT_CHARS = 200


@dataclass(frozen=True)
class SuiteItem:
    id: str  # "<category>/<source>/<prompt id>"
    category: str
    messages: list[dict]
    source: str
    licence: str
    prompt_id: str
    language: str = "en"

    def to_dict(self) -> dict:
        return asdict(self)


# --- the split ----------------------------------------------------------------------------------------------

def pool_position(source: str, prompt_id: str) -> float:
    """A stable number in [0, 1) for the prompt's group; below ``eval_fraction`` means eval pool."""
    group = get_source(source).group(prompt_id)
    digest = hashlib.sha256(f"{source}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_eval(source: str, prompt_id: str) -> bool:
    return pool_position(source, prompt_id) < get_source(source).eval_fraction


def eval_pool_ids(source: str, cache: Path | None = None) -> set[str]:
    return {p.id for p in load_prompts(source, cache) if is_eval(source, p.id)}


# --- rendering a prompt record into user turns --------------------------------------------------------------

CODING = "Complete this Python function.\n\n```python\n{}```"
MATH_EN = "{}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
QA = "Answer the question using the passage below.\n\nPassage:\n{context}\n\nQuestion: {question}"
RAG = "Answer the question using the documents below.\n\n{context}\n\nQuestion: {question}"


def _with_context(template: str, p: Prompt, limit: int) -> str | None:
    frame = template.format(context="", question=p.turns[0])
    budget = limit - len(frame)
    context = p.context or ""
    if budget < min(MIN_CONTEXT_CHARS, len(context)):
        return None
    return template.format(context=truncate_text(context, budget), question=p.turns[0])


def render_first_turn(p: Prompt, limit: int) -> str | None:
    """The first user message for a record, at most ``limit`` characters; None when it cannot fit."""
    if p.source == "humaneval":
        text = CODING.format(p.turns[0].strip("\n") + "\n")
    elif p.source == "mmath" and p.language == "en":
        text = MATH_EN.format(p.turns[0])
    elif p.source == "squad":
        return _with_context(QA, p, limit)
    elif p.source == "hotpotqa":
        return _with_context(RAG, p, limit)
    elif p.source == "dataset_build":
        return _with_context("{question}\n\n{context}", p, limit)
    else:  # mt_bench, writingbench, mmath in other languages: the request as written
        text = p.turns[0]
    return text if len(text) <= limit else None


def _messages(p: Prompt, limit: int, all_turns: bool) -> list[dict] | None:
    first = render_first_turn(p, limit)
    if first is None:
        return None
    turns = [first] + (p.turns[1:] if all_turns else [])
    return [{"role": "user", "content": t} for t in turns]


# --- the suite ----------------------------------------------------------------------------------------------

def _lang(code: str | None) -> Callable[[Prompt], bool]:
    return lambda p: p.language == code if code else p.language != "en"


def _mt(category: str) -> tuple[tuple[str, Callable[[Prompt], bool]], ...]:
    return (("mt_bench", lambda p: p.category == category),)


# category -> the (source, filter) pools it draws from, interleaved in this order
PICKS: dict[str, tuple[tuple[str, Callable[[Prompt], bool]], ...]] = {
    "coding": (("humaneval", lambda p: True),),
    "humanities": _mt("humanities"),
    "math": (("mmath", _lang("en")),),
    "multilingual": (("mmath", _lang(None)), ("dataset_build", _lang(None))),
    "qa": (("squad", lambda p: True),),
    "rag": (("hotpotqa", lambda p: True),),
    "reasoning": _mt("reasoning"),
    "roleplay": _mt("roleplay"),
    "stem": _mt("stem"),
    "summarization": (("dataset_build", _lang("en")),),
    "writing": (("writingbench", _lang("en")),),
}
assert tuple(PICKS) == SUITE_CATEGORIES


def _interleave(pools: Sequence[list]) -> list:
    out: list = []
    for i in range(max((len(p) for p in pools), default=0)):
        out += [pool[i] for pool in pools if i < len(pool)]
    return out


def choose_categories(categories: Iterable[str] | None, valid: Sequence[str], what: str = "suite") -> list[str]:
    """The chosen categories in ``valid``'s order (all when None); an unknown one or none is one line naming both."""
    if categories is None:
        return list(valid)
    chosen = list(dict.fromkeys(categories))
    unknown = [c for c in chosen if c not in valid]
    if unknown or not chosen:
        problem = f"unknown {what} category '{unknown[0]}'" if unknown else f"no {what} category given"
        raise UserError(f"{problem}; valid: {', '.join(valid)}")
    return [c for c in valid if c in chosen]


def _check_categories(categories: Iterable[str] | None) -> list[str]:
    return choose_categories(categories, SUITE_CATEGORIES)


def build_suite(name: str = SUITE_NAME, categories: Iterable[str] | None = None, num_prompts: int = 10,
                seed: int = 0, cache: Path | None = None, max_prompt_chars: int = 6000) -> list[SuiteItem]:
    """``num_prompts`` items per category (fewer where the eval pool is smaller: MT-Bench has 10 per
    category), drawn from the eval pool only. Same arguments and cache, same items in the same order; the
    items for N are the first N of those for a larger N."""
    if name != SUITE_NAME:
        raise UserError(f"unknown suite '{name}'; available: {SUITE_NAME}")
    if num_prompts < 1:
        raise UserError(f"num_prompts must be at least 1, got {num_prompts}")
    if max_prompt_chars < 500:
        raise UserError(f"max_prompt_chars must be at least 500, got {max_prompt_chars}")
    items: list[SuiteItem] = []
    for category in _check_categories(categories):
        pools = []
        for source, keep in PICKS[category]:
            pool = []
            for p in sorted(load_prompts(source, cache), key=lambda p: p.id):
                if keep(p) and is_eval(source, p.id):
                    messages = _messages(p, max_prompt_chars, all_turns=False)
                    if messages is not None:
                        pool.append(SuiteItem(f"{category}/{source}/{p.id}", category, messages, source,
                                              p.licence, p.id, p.language))
            random.Random(f"{name}:{seed}:{category}:{source}").shuffle(pool)
            pools.append(pool)
        items += _interleave(pools)[:num_prompts]
    return items


def suite_provenance(items: Iterable[SuiteItem]) -> dict:
    """Sources (package, version, wheel sha256, licences, item count), counts per category, the split rule."""
    items = list(items)
    categories: dict[str, int] = {}
    sources: dict[str, dict] = {}
    for it in items:
        categories[it.category] = categories.get(it.category, 0) + 1
        src = SOURCES[it.source]
        row = sources.setdefault(it.source, {
            "package": src.package, "version": src.version, "wheel_sha256": src.wheel_sha256,
            "origin": src.origin, "package_licence": src.package_licence, "data_licence": src.data_licence,
            "items": 0,
        })
        row["items"] += 1
    return {
        "suite": SUITE_NAME, "items": len(items), "categories": categories, "sources": sources,
        "split": {"rule": "sha256('<source>:<group>') / 2**64 < eval_fraction -> eval pool",
                  "eval_fraction": {s: SOURCES[s].eval_fraction for s in sources}},
    }


# --- training prompts ---------------------------------------------------------------------------------------

TRAIN_SOURCES = tuple(name for name, src in SOURCES.items() if src.eval_fraction < 1.0)


def training_items(sources: Iterable[str] | None = None, num_conversations: int = 512, seed: int = 0,
                   cache: Path | None = None, max_prompt_chars: int = 6000,
                   prompt_tokens: Callable[[str], int] | None = None,
                   max_prompt_tokens: int | None = None) -> list[SuiteItem]:
    """Like ``training_conversations`` but with ids and provenance (category ``train``).

    ``prompt_tokens`` (the tokens the target prefills for a first user turn, ``data.chat.prompt_token_counter``)
    with ``max_prompt_tokens``: a first turn over the limit is skipped, or, when it carries a passage (QA, RAG,
    summaries), rendered again with the passage cut to fit; ``max_prompt_chars`` is then only the first rendering's
    budget. Pools are drawn round-robin and a prompt is counted only when its turn comes, so the cost is the
    tokenizer on about ``num_conversations`` prompts, not on every pool."""
    names = list(dict.fromkeys(sources)) if sources is not None else list(TRAIN_SOURCES)
    for name in names:
        get_source(name)
    if num_conversations < 1:
        raise UserError(f"num_conversations must be at least 1, got {num_conversations}")
    if (prompt_tokens is None) != (max_prompt_tokens is None):
        raise ValueError("prompt_tokens and max_prompt_tokens go together")
    pools = []
    for name in names:
        pool = []
        for p in sorted(load_prompts(name, cache), key=lambda p: p.id):
            if not is_eval(name, p.id):
                messages = _messages(p, max_prompt_chars, all_turns=True)
                if messages is not None:
                    pool.append((p, messages))
        random.Random(f"train:{seed}:{name}").shuffle(pool)
        pools.append(pool)
    items: list[SuiteItem] = []
    live = [iter(pool) for pool in pools]
    while live and len(items) < num_conversations:
        for it in list(live):
            for p, messages in it:  # this pool's next prompt that fits
                if prompt_tokens is not None:
                    messages = _fit_tokens(p, messages, prompt_tokens, max_prompt_tokens)
                if messages is not None:
                    items.append(SuiteItem(f"train/{p.source}/{p.id}", "train", messages, p.source, p.licence,
                                           p.id, p.language))
                    break
            else:
                live.remove(it)
            if len(items) == num_conversations:
                break
    if not items and prompt_tokens is not None and any(pools):
        raise UserError(f"no training prompt in {', '.join(names)} fits max_prompt_tokens {max_prompt_tokens} "
                        "(the target's tokens, chat template included); raise drafter.training.data."
                        "max_prompt_tokens")
    if not items:
        raise UserError(f"no training prompts in {', '.join(names)} (evaluation-only sources: "
                        f"{', '.join(sorted(set(SOURCES) - set(TRAIN_SOURCES)))}); choose from "
                        f"{', '.join(TRAIN_SOURCES)}")
    return items


def _fit_tokens(p: Prompt, messages: list[dict], count: Callable[[str], int], limit: int) -> list[dict] | None:
    """``messages`` with a first turn of at most ``limit`` tokens: as it is, or with its passage cut (rendered
    again at the character budget the measured tokens per character give, up to four times); None when the
    turn has no passage to cut or cannot fit."""
    text = messages[0]["content"]
    for _ in range(4):
        n = count(text)
        if n <= limit:
            return [{"role": "user", "content": text}, *messages[1:]]
        if not p.context:
            return None
        text = render_first_turn(p, int(len(text) * limit / n * 0.95))
        if text is None:
            return None
    return None


def training_conversations(sources: Iterable[str] | None = None, num_conversations: int = 512, seed: int = 0,
                           cache: Path | None = None, max_prompt_chars: int = 6000) -> list[list[dict]]:
    """User turns from the train pool, the sources interleaved round-robin (each shuffled by ``seed``).
    A conversation with several turns needs the caller to generate the assistant replies in between."""
    return [item.messages for item in training_items(sources, num_conversations, seed, cache, max_prompt_chars)]
