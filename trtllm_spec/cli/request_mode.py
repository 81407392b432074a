"""The request-mode flags of every measurement, as one reusable decorator (``@request_mode_options``).

It adds ``--chat-template-arg KEY=VALUE`` (repeatable), ``--response-format json_object|SCHEMA`` and ``--top-p``
to a command that already has ``--temperature``, and hands the command one ``request_mode`` argument (a
``core.request_mode.RequestMode``) instead of the three raw flags. The checks that need the target (a template
argument its chat template does not read) run where the tokenizer loads (data/chat.py).
"""

from __future__ import annotations

import functools
from pathlib import Path

import click

FLAGS = ("chat_template_arg", "response_format", "top_p")


def _read_schema(text: str) -> str:
    from trtllm_spec.errors import UserError

    p = Path(text).expanduser()
    if not p.is_file():
        raise UserError(f"--response-format {text}: neither 'json_object', inline JSON nor an existing JSON schema "
                        "file; give one of them")
    from trtllm_spec.core.request_mode import schema_size_problem

    too_big = schema_size_problem(p.stat().st_size, f"--response-format {text}")
    if too_big:  # refused before it is read
        raise UserError(too_big)
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--response-format {text}: cannot be read as UTF-8 text ({exc})") from None


def request_mode_options(fn):
    """Add the request-mode flags to a click command; the callback receives ``request_mode`` (``temperature``, the
    command's own flag, is read for it and still passed on)."""

    @functools.wraps(fn)
    def wrapper(*args, chat_template_arg: tuple[str, ...] = (), response_format: str | None = None,
                top_p: float | None = None, **kwargs):
        from trtllm_spec.core.request_mode import parse_cli_mode

        kwargs["request_mode"] = parse_cli_mode(chat_template_arg, response_format, top_p,
                                                float(kwargs.get("temperature") or 0.0), read_file=_read_schema)
        return fn(*args, **kwargs)

    for decorator in reversed((
        click.option("--chat-template-arg", "chat_template_arg", multiple=True, metavar="KEY=VALUE",
                     help="Request mode: an argument the target's chat template reads, e.g. enable_thinking=false "
                     "(Qwen3-style thinking switch); repeatable; one the template does not read is refused."),
        click.option("--response-format", metavar="json_object|SCHEMA.json|'{...}'",
                     help="Request mode: structured output, 'json_object' or a JSON schema (file or inline): "
                     "xgrammar masks our decoder, llama.cpp and the served endpoint get the same schema."),
        click.option("--top-p", type=float, help="Request mode: nucleus sampling mass with --temperature > 0 "
                     "(default 1.0)."),
    )):
        wrapper = decorator(wrapper)
    return wrapper
