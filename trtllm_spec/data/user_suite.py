"""Your own measurement prompts: ``measure --suite FILE|DIR`` and recipe ``measure.suite: PATH``.

A suite file is JSONL, one prompt per line, in any of these layouts (keys other than these are ignored):

- OpenAI chat: ``{"id"?, "category"?, "messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}``
- plain: ``{"id"?, "category"?, "prompt": str}``
- ShareGPT: ``{"id"?, "category"?, "conversations": [{"from": "system"|"human"|"gpt", "value": str}, ...]}``
  (``user``/``assistant`` are accepted as ``from`` too)
- SPEED-Bench rows (nvidia/SPEED-Bench ``qualitative`` / ``throughput_*`` configs: ``question_id``,
  ``category``, ``turns`` = the user turns): the released files are parquet; export them to JSONL once (see
  docs/speculation_profile.md, "Your own prompts"). Only the first user turn is measured, as speed-lite does
  with MT-Bench.

Trailing assistant turns are dropped (the target writes the reply being measured); what is left must end with a
user turn. Categories come from the rows (``category``), else from the file name inside a folder
(``DIR/coding.jsonl`` -> ``coding``), else one category ``all``. ``num_prompts`` per category are taken in file
order. A suite may not share prompt text with the training conversations (see ``overlapping``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from trtllm_spec.core.suites import BUILTIN_SUITES, SUITE_NAME
from trtllm_spec.data.suite import SuiteItem
from trtllm_spec.errors import UserError

USER_SOURCE = "user"
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant"}
DEFAULT_CATEGORY = "all"
PARQUET_HINT = ("export it to JSONL first: python -c \"import pandas as pd; pd.read_parquet('{p}')"
                ".to_json('{stem}.jsonl', orient='records', lines=True)\"")


def is_builtin(suite: str | Path) -> bool:
    return str(suite) in BUILTIN_SUITES


def suite_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".parquet"))
        if not files:
            raise UserError(f"suite folder {path} has no *.jsonl files; put one JSONL file per category there "
                            "(e.g. coding.jsonl) or give a single file")
        return files
    if not path.is_file():
        raise UserError(f"suite {str(path)!r} is neither '{SUITE_NAME}' nor an existing JSONL file or folder")
    return [path]


def _messages(row: dict, where: str) -> list[dict]:
    if "messages" in row:
        raw, role_key, text_key = row["messages"], "role", "content"
    elif "conversations" in row:
        raw, role_key, text_key = row["conversations"], "from", "value"
    elif "prompt" in row:
        raw, role_key, text_key = [{"role": "user", "content": row["prompt"]}], "role", "content"
    elif "turns" in row:  # SPEED-Bench / MT-Bench: user turns only
        turns = row["turns"]
        if not isinstance(turns, list) or not turns:
            raise UserError(f"{where}: 'turns' must be a non-empty list of user turns")
        raw, role_key, text_key = [{"role": "user", "content": turns[0]}], "role", "content"
    else:
        raise UserError(f"{where}: a prompt needs 'messages' (OpenAI chat), 'prompt', 'conversations' (ShareGPT) or "
                        f"'turns' (SPEED-Bench); this line has {', '.join(sorted(row)) or 'no keys'}")
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}: the conversation must be a non-empty list of turns")
    out = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise UserError(f"{where}: turn {i} is not an object with {role_key!r} and {text_key!r}")
        role, text = turn.get(role_key), turn.get(text_key)
        if role not in ROLES:
            raise UserError(f"{where}: turn {i} has unknown role {role!r}; allowed: {', '.join(ROLES)}")
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where}: turn {i} ({role}) has no text in {text_key!r}")
        out.append({"role": ROLES[role], "content": text})
    while out and out[-1]["role"] == "assistant":
        out.pop()
    if not out or out[-1]["role"] != "user":
        raise UserError(f"{where}: the conversation must contain a user turn for the target to answer")
    return out


def read_suite_file(path: Path, default_category: str) -> list[SuiteItem]:
    if path.suffix == ".parquet":
        raise UserError(f"suite file {path} is parquet; {PARQUET_HINT.format(p=path, stem=path.stem)}")
    from trtllm_spec.core.files import read_text

    items: list[SuiteItem] = []
    seen: set[str] = set()
    for n, line in enumerate(read_text(path, "suite file", UserError).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"suite file {path} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} is not JSON ({exc.msg}); one JSON object per line") from None
        if not isinstance(row, dict):
            raise UserError(f"{where} is not a JSON object")
        messages = _messages(row, where)
        cat = row.get("category", default_category)
        if not isinstance(cat, str) or not cat.strip() or "/" in cat:
            raise UserError(f"{where}: category {cat!r} must be a non-empty name without '/'")
        rid = str(row.get("id", row.get("question_id", f"{path.stem}-{n}")))
        if rid in seen:
            raise UserError(f"{where}: id {rid!r} appears twice in the file; ids must be unique")
        seen.add(rid)
        items.append(SuiteItem(f"{cat}/{USER_SOURCE}/{rid}", cat.strip(), messages, USER_SOURCE,
                               str(row.get("licence") or row.get("license") or "unknown (user file)"), rid,
                               str(row.get("language") or "unknown")))
    if not items:
        raise UserError(f"suite file {path} holds no prompts; write one JSON object per line, e.g. "
                        '{"category": "coding", "messages": [{"role": "user", "content": "..."}]}')
    return items


def load_user_suite(path: Path, categories: Iterable[str] | None = None, num_prompts: int = 10
                    ) -> tuple[list[SuiteItem], dict]:
    """(items, provenance) of a suite file or folder: ``num_prompts`` per category, in file order."""
    if num_prompts < 1:
        raise UserError(f"num_prompts must be at least 1, got {num_prompts}")
    files = suite_files(path)
    rows: list[SuiteItem] = []
    for f in files:
        rows += read_suite_file(f, f.stem if path.is_dir() else DEFAULT_CATEGORY)
    ids = [it.id for it in rows]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise UserError(f"suite {path}: {dup!r} appears in two files; ids must be unique per category")
    present = list(dict.fromkeys(it.category for it in rows))
    chosen = present if categories is None else list(dict.fromkeys(categories))
    unknown = [c for c in chosen if c not in present]
    if unknown or not chosen:
        raise UserError(f"suite {path} has no category {unknown[0] if unknown else '(none given)'!r}; it has: "
                        f"{', '.join(present)}")
    items = [it for c in chosen for it in [r for r in rows if r.category == c][:num_prompts]]
    prov = {
        "suite": str(path.resolve()), "items": len(items),
        "categories": {c: sum(it.category == c for it in items) for c in chosen},
        "sources": {USER_SOURCE: {"files": [{"path": str(f.resolve()), "sha256": _sha(f)} for f in files],
                                  "items": len(items)}},
        "split": None,
    }
    return items, prov


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- overlap with the training conversations -------------------------------------------------------

def _norm(text: str) -> str:
    return " ".join(text.split())


def prompt_texts(conversations: Iterable[Sequence[dict]]) -> set[str]:
    """The user turns of ``conversations``, whitespace-normalised."""
    return {_norm(m["content"]) for conv in conversations for m in conv
            if m.get("role") == "user" and isinstance(m.get("content"), str)}


def overlapping(items: Sequence[SuiteItem], training: set[str]) -> list[str]:
    """Ids of suite items sharing a user turn's text with the training conversations."""
    return [it.id for it in items if prompt_texts([it.messages]) & training]


def check_overlap(items: Sequence[SuiteItem], training: set[str] | None, allow: bool, against: str,
                  warn=None) -> dict:
    """Refuse (or, with ``allow``, warn about) suite prompts that were training prompts; returns the record
    kept in the profile's suite provenance."""
    if training is None:
        return {"checked_against": None, "note": against}
    hits = overlapping(items, training)
    if hits and not allow:
        raise UserError(f"{len(hits)} of {len(items)} suite prompts are also training prompts ({against}), e.g. "
                        f"{hits[0]}: acceptance measured on them is inflated; remove them or pass --allow-overlap "
                        "(recipe measure.allow_overlap: true) to measure anyway with a warning")
    if hits and warn is not None:
        warn(f"warning: {len(hits)} of {len(items)} suite prompts are also training prompts ({against}); "
             "their acceptance is inflated")
    return {"checked_against": against, "overlapping": len(hits), "allowed": bool(hits) and allow}


def check_context(items: Sequence[SuiteItem], prompts: Sequence[Sequence[int]], max_new_tokens: int,
                  context: int | None, draft_len: int = 0) -> None:
    """Refuse prompts that do not fit the target's context with the reply and the drafts."""
    if not context:
        return
    for it, ids in zip(items, prompts, strict=True):
        need = len(ids) + max_new_tokens + draft_len + 1
        if need > context:
            raise UserError(f"suite prompt {it.id} has {len(ids)} tokens; with --max-new-tokens {max_new_tokens} and "
                            f"D = {draft_len} it needs {need} positions, over the target's context of {context} "
                            "(max_position_embeddings); shorten or drop it, or lower --max-new-tokens")


# ---- one entry point for both kinds of suite -----------------------------------------------------------

def select_suite(suite: str | Path, categories: Iterable[str] | None, num_prompts: int, seed: int
                 ) -> tuple[list[SuiteItem], dict]:
    """(items, suite provenance) for ``speed-lite`` or a suite file/folder."""
    if is_builtin(suite):
        from trtllm_spec.data.mode_suite import MODES_SUITE, build_mode_suite
        from trtllm_spec.data.suite import build_suite, suite_provenance

        if str(suite) == MODES_SUITE:
            items = build_mode_suite(categories, num_prompts, seed)
            return items, {**suite_provenance(items), "name": MODES_SUITE}
        items = build_suite(str(suite), categories, num_prompts, seed)
        return items, suite_provenance(items)
    return load_user_suite(Path(suite), categories, num_prompts)


# the estimate-first rule of ``measure`` (as ``data regenerate`` prints its budget first): above this many tokens to
# generate a measurement is refused unless ``--allow-long`` says it is meant (10,000 prompts x 128 tokens is hours
# on a CPU and not a default anyone wants by accident; speed-lite's default is ~8,000)
MEASURE_TOKEN_LIMIT = 200_000


def measure_budget(requests: int, max_new_tokens: int, what: str, allow_long: bool,
                   log: Callable[[str], None]) -> int:
    """Print the work a measurement starts (requests x up to ``max_new_tokens`` each) before anything is loaded
    or sent, and refuse it above ``MEASURE_TOKEN_LIMIT`` unless ``allow_long``. Returns the token bound."""
    from trtllm_spec.core.provenance import command_line

    tokens = requests * max_new_tokens
    log(f"budget: {requests} requests ({what}) x up to {max_new_tokens} new tokens = up to {tokens:,} generated "
        f"tokens (limit without --allow-long: {MEASURE_TOKEN_LIMIT:,})")
    if tokens > MEASURE_TOKEN_LIMIT and not allow_long:
        raise UserError(f"measure would generate up to {tokens:,} tokens ({requests} requests x {max_new_tokens}), "
                        f"more than the {MEASURE_TOKEN_LIMIT:,} started without asking; lower --num-prompts / "
                        f"--categories / --max-new-tokens, or rerun with --allow-long: {command_line()} --allow-long")
    return tokens


def conversations_file_texts(path: Path) -> set[str]:
    """User-turn texts of a conversations JSONL (the layouts above; assistant turns allowed)."""
    return prompt_texts(it.messages for it in read_suite_file(path, DEFAULT_CATEGORY))


def packaged_train_texts() -> tuple[set[str] | None, str]:
    """User-turn texts of every prompt in the packaged train pools (what a trtllm-spec drafter trains on unless
    its recipe gives data.path), or (None, why not) when the prompt assets are not fetched."""
    from trtllm_spec.data.suite import TRAIN_SOURCES, training_items

    try:
        items = training_items(TRAIN_SOURCES, num_conversations=1_000_000)
    except UserError as exc:
        return None, f"not checked: the packaged train pools are not available here ({str(exc).splitlines()[0]})"
    return prompt_texts(it.messages for it in items), f"the packaged train pools ({', '.join(TRAIN_SOURCES)})"


def recipe_train_texts(recipe) -> tuple[set[str] | None, str]:
    """User-turn texts of the conversations ``recipe``'s drafter trains on, or (None, why none)."""
    training = getattr(recipe.drafter, "training", None)
    if training is None or recipe.drafter.checkpoint:
        return None, f"not checked: the {recipe.drafter.type} drafter is not trained by this recipe"
    d = training.data
    if d.path:
        p = recipe.resolve_path(d.path)
        if p is None or not p.is_file():
            raise UserError(f"drafter.training.data.path {d.path} does not exist")
        return conversations_file_texts(p), f"drafter.training.data.path {d.path}"
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data.chat import recipe_training_items

    try:
        target = resolve_target(recipe.target.model, recipe.base_dir)
        if target.path is None:  # which prompts fit data.max_prompt_tokens depends on the target's tokenizer
            return None, f"not checked: {recipe.target.model!r} has no checkpoint here to tokenize the training prompts"
        items = recipe_training_items(recipe, target.path)
    except UserError as exc:
        return None, f"not checked: the training prompts are not available here ({str(exc).splitlines()[0]})"
    return prompt_texts(it.messages for it in items), (f"the recipe's {len(items)} training conversations "
                                                       f"({', '.join(d.sources)})")


def suite_checker(suite: str | Path, training_data: Path | None, allow: bool, warn):
    """The ``suite_check`` of ``measure`` for the CLI: None for speed-lite (its split keeps it apart from the
    train pools), else the overlap check against ``training_data`` and the packaged train pools."""
    if is_builtin(suite):
        if training_data is not None or allow:
            raise UserError(f"--training-data and --allow-overlap check your own --suite; {SUITE_NAME} is split from "
                            "the training prompts by construction: drop them")
        return None
    if training_data is not None and not Path(training_data).is_file():
        raise UserError(f"--training-data {training_data} does not exist; give the drafter's training "
                        "conversations (JSONL)")

    def check(items: list[SuiteItem]) -> dict:
        texts, against = packaged_train_texts()
        if training_data is not None:
            own = conversations_file_texts(Path(training_data))
            texts, against = ((texts or set()) | own,
                              f"--training-data {training_data}" + ("" if texts is None else f" and {against}"))
        return check_overlap(items, texts, allow, against, warn)

    return check


def recipe_suite(recipe) -> str:
    """``measure.suite`` of ``recipe``: 'speed-lite', or the suite path resolved against the recipe's folder."""
    suite = recipe.measure.suite
    if is_builtin(suite):
        return suite
    p = recipe.resolve_path(suite)
    if p is None or not p.exists():
        raise UserError(f"measure.suite {suite!r} is neither '{SUITE_NAME}' nor an existing JSONL file or folder "
                        f"(relative paths are read from the recipe's folder {recipe.base_dir})")
    return str(p)


def recipe_suite_check(recipe, warn):
    """The overlap check of ``recipe``'s own suite against the conversations its drafter trains on."""
    if is_builtin(recipe.measure.suite):
        return None

    def check(items: list[SuiteItem]) -> dict:
        texts, against = recipe_train_texts(recipe)
        return check_overlap(items, texts, recipe.measure.allow_overlap, against, warn)

    return check


def suite_fingerprint(suite: str) -> list | str:
    """What a cached measurement depends on: the suite name, or its files' hashes."""
    if is_builtin(suite):
        return suite
    return [(f.name, _sha(f)) for f in suite_files(Path(suite))]
