"""The request mode a deployment serves: chat-template arguments (e.g. Qwen3's ``enable_thinking``), a structured-
output constraint (a JSON schema or ``"json_object"``) and the sampling temperature / top-p.

Acceptance depends on the mode, not only on the drafter (thinking on/off, grammar masks, sampling: issue 38's
sources), so ``workload.request_mode`` is measured in every ``measure`` (reference decoder, llama.cpp, a served
endpoint), recorded in the profile, and compared with the recipe's by ``plan --acceptance``. Data only here: no
torch, no tokenizer; the checks that need the target's template live in data/chat.py (``check_template_kwargs``),
the grammar in runtime/constraint.py (xgrammar).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from trtllm_spec.core.schema import StrictModel

JSON_OBJECT = "json_object"
# "json_object" is measured as the schema {"type": "object"} on every engine: any JSON object, the same grammar for
# xgrammar (our decoder, TensorRT-LLM's guided decoding) and llama.cpp's json_schema -> GBNF conversion
JSON_OBJECT_SCHEMA: dict = {"type": "object"}
# the largest schema measured (its JSON text): xgrammar compiles it against the target's whole vocabulary, and the
# served engines get it with every request; a schema beyond this is a mistake (a data file, a dump), not a format
MAX_SCHEMA_BYTES = 1_000_000
REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def schema_size_problem(n_bytes: int, what: str) -> str | None:
    """The one-line refusal of a schema of ``n_bytes`` (None: small enough)."""
    if n_bytes <= MAX_SCHEMA_BYTES:
        return None
    return (f"{what} is {n_bytes / 1e6:.1f} MB of JSON schema; at most {MAX_SCHEMA_BYTES / 1e6:g} MB is compiled "
            "(xgrammar builds a grammar over the whole vocabulary from it); give the schema of one reply")


def outside_refs(schema: Any, path: str = "") -> list[tuple[str, str]]:
    """(where, reference) for every ``$ref`` that leaves the schema: a file, a URL, another document. Only
    references inside it (``#`` / ``#/...``) are resolved by xgrammar, llama.cpp and the served engines alike, and
    none is fetched from anywhere."""
    out: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        for k, v in schema.items():
            where = f"{path}/{k}"
            if k in REF_KEYS and isinstance(v, str) and not v.startswith("#"):
                out.append((where, v))
            elif k not in ("const", "enum", "default", "examples"):  # data, not schema
                out += outside_refs(v, where)
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            out += outside_refs(v, f"{path}/{i}")
    return out


def check_json_schema(schema: Any, where: str) -> None:
    """Refuse a value that is not a JSON Schema (the metaschema of its ``$schema``, Draft 2020-12 otherwise), with
    the ``jsonschema`` package; one line naming ``where`` and the first problem."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where}: a JSON schema is an object (e.g. {{\"type\": \"object\"}}) or the text "
                         f"'{JSON_OBJECT}', not {type(schema).__name__}")
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - a base dependency
        raise ValueError(f"{where}: checking a JSON schema needs the jsonschema package (pip install "
                         "jsonschema)") from None
    too_big = schema_size_problem(len(json.dumps(schema)), where)
    if too_big:
        raise ValueError(too_big)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(top level)"
        raise ValueError(f"{where} is not a valid JSON Schema at {path}: {exc.message}; fix the schema") from None
    refs = outside_refs(schema)
    if refs:
        at, ref = refs[0]
        raise ValueError(f"{where}: $ref {ref!r} at {at or '/'} points outside the schema (a file or URL, which is "
                         "never fetched); only references inside it resolve ('#/$defs/...'): inline what it names")


class RequestMode(StrictModel):
    """How every measured request is made; the defaults are the checkpoint's template defaults, no constraint,
    greedy (what ``measure`` did before request modes)."""

    chat_template_kwargs: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="arguments the chat template reads, e.g. {enable_thinking: false} "
        "(Qwen3-style templates); one the target's template does not read is refused")
    response_format: str | dict[str, Any] | None = Field(
        None, description="structured output: 'json_object' (any JSON object) or a JSON schema (an object); "
        "applied with xgrammar in our decoder, json_schema in llama.cpp, guided decoding in TensorRT-LLM")
    temperature: float = Field(0.0, ge=0, le=10, description="sampling temperature; 0 = greedy")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass (with temperature > 0)")

    @field_validator("chat_template_kwargs")
    @classmethod
    def _names(cls, v: dict) -> dict:
        import re

        bad = [k for k in v if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", k)]
        if bad:
            raise ValueError(f"chat_template_kwargs key {bad[0]!r}: a template variable name (letters, digits, "
                             "'_'), e.g. enable_thinking")
        return v

    @field_validator("response_format", mode="before")
    @classmethod
    def _schema_shaped(cls, v: Any) -> Any:
        # valid JSON that is neither an object nor 'json_object' (a list, a number): one line, not the union's two
        if v is not None and not isinstance(v, str | dict):
            raise ValueError(f"a JSON schema is an object (e.g. {{\"type\": \"object\"}}) or the text "
                             f"'{JSON_OBJECT}', not a JSON {type(v).__name__} ({json.dumps(v)[:40]})")
        return v

    @field_validator("response_format")
    @classmethod
    def _format(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v != JSON_OBJECT:
                raise ValueError(f"response_format {v!r}: give '{JSON_OBJECT}' or a JSON schema (an object)")
            return v
        if v is not None:
            check_json_schema(v, "response_format")
        return v

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, v: float) -> float:
        return float(v)

    # ---- derived -------------------------------------------------------------------------------------------
    @property
    def samples(self) -> bool:
        return self.temperature > 0

    @property
    def constrained(self) -> bool:
        return self.response_format is not None

    def json_schema(self) -> dict | None:
        """The constraint as one JSON schema (``json_object`` = any object), or None."""
        if self.response_format is None:
            return None
        return dict(JSON_OBJECT_SCHEMA) if self.response_format == JSON_OBJECT else self.response_format

    def as_dict(self) -> dict:
        """What the profile records (and what ``plan --acceptance`` compares)."""
        return {"chat_template_kwargs": dict(sorted(self.chat_template_kwargs.items())),
                "response_format": self.response_format, "temperature": float(self.temperature),
                "top_p": float(self.top_p)}

    def label(self) -> str:
        """A short name for reports: 'default', 'enable_thinking=False, json_object, T=0.7, top_p=0.9'."""
        parts = [f"{k}={v}" for k, v in sorted(self.chat_template_kwargs.items())]
        if self.response_format == JSON_OBJECT:
            parts.append("json_object")
        elif self.response_format is not None:
            parts.append("json_schema")
        if self.samples:
            parts.append(f"T={self.temperature:g}" + (f", top_p={self.top_p:g}" if self.top_p < 1 else ""))
        elif self.top_p < 1:
            parts.append(f"top_p={self.top_p:g}")
        return ", ".join(parts) or "default"


DEFAULT = RequestMode()


def recipe_mode(recipe) -> RequestMode:
    """A recipe's ``workload.request_mode``, at ``measure.temperature`` when only that is set (the recipe refuses
    two different temperatures)."""
    mode = recipe.workload.request_mode
    if not mode.temperature and recipe.measure.temperature:
        return mode.model_copy(update={"temperature": recipe.measure.temperature})
    return mode


def profile_mode(profile: dict) -> RequestMode | None:
    """The mode a speculation profile was measured in: its ``settings.request_mode``, else (a profile from before
    request modes) the default mode at its ``settings.temperature``; None for a file that records no settings
    (a bare acceptance file)."""
    settings = profile.get("settings") if isinstance(profile, dict) else None
    if not isinstance(settings, dict):
        return None
    if isinstance(settings.get("request_mode"), dict):
        return mode_from_dict(settings["request_mode"])
    t = settings.get("temperature")
    return RequestMode(temperature=float(t) if isinstance(t, int | float) and t >= 0 else 0.0)


def check_profile_mode(profile: dict, recipe, where: str) -> None:
    """Refuse planning with a profile measured in another request mode than the recipe's (acceptance moves with
    the mode: thinking on/off, grammar masks, sampling), naming both modes and the fields that differ."""
    from trtllm_spec.errors import UserError

    measured = profile_mode(profile)
    if measured is None:
        return
    wanted = recipe_mode(recipe)
    diff = mode_difference(measured, wanted)
    if diff:
        raise UserError(f"{where} was measured in request mode '{measured.label()}', the recipe serves "
                        f"'{wanted.label()}' ({'; '.join(diff)}); measure in the recipe's mode (trtllm-spec "
                        "measure with the same --chat-template-arg / --response-format / --temperature / --top-p) "
                        "or set workload.request_mode to the profile's")


def mode_from_dict(data: Any) -> RequestMode:
    """A recorded mode (profile settings) back as a ``RequestMode``; a profile without one was measured in the
    default mode (greedy, template defaults, unconstrained) at its settings.temperature."""
    if not isinstance(data, dict):
        return RequestMode()
    return RequestMode(**data)


def mode_difference(measured: RequestMode, wanted: RequestMode) -> list[str]:
    """The fields in which two modes differ, as 'field measured -> wanted' phrases (empty: the same mode)."""
    a, b = measured.as_dict(), wanted.as_dict()
    return [f"{k} {json.dumps(a[k], sort_keys=True)} (profile) vs {json.dumps(b[k], sort_keys=True)} (recipe)"
            for k in a if a[k] != b[k]]


def _shown(text: str) -> str:
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def parse_cli_mode(template_args: tuple[str, ...] | list[str], response_format: str | None, top_p: float | None,
                   temperature: float, *, read_file) -> RequestMode:
    """The CLI's request-mode flags as a ``RequestMode``: ``--chat-template-arg KEY=VALUE`` (a YAML scalar:
    true/false, numbers, text), ``--response-format json_object|SCHEMA.json|'{...}'``, ``--top-p``.
    ``read_file(path)`` returns a schema file's text (the CLI passes one that refuses in one line)."""
    from pydantic import ValidationError

    from trtllm_spec.core.files import parse_yaml
    from trtllm_spec.core.schema import format_validation_error
    from trtllm_spec.errors import UserError

    kwargs: dict[str, Any] = {}
    for item in template_args:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--chat-template-arg {item!r}: expected KEY=VALUE, e.g. --chat-template-arg "
                            "enable_thinking=false")
        try:
            value = parse_yaml(raw, "--chat-template-arg") if raw.strip() else ""
        except Exception:  # noqa: BLE001 - an unparsable scalar is text
            value = raw
        if value is None or isinstance(value, dict | list):
            raise UserError(f"--chat-template-arg {item!r}: the value must be true/false, a number or text")
        kwargs[key.strip()] = value
    fmt: Any = None
    if response_format is not None:
        text = response_format.strip()
        if text == JSON_OBJECT:
            fmt = JSON_OBJECT
        else:
            if not text.startswith(("{", "[", '"')):
                text = read_file(text)
            too_big = schema_size_problem(len(text.encode("utf-8")), f"--response-format {_shown(text)}")
            if too_big:
                raise UserError(too_big)
            try:
                fmt = json.loads(text)
            except json.JSONDecodeError as exc:
                raise UserError(f"--response-format {response_format}: not JSON ({exc.msg} at line {exc.lineno}); "
                                f"give '{JSON_OBJECT}', a JSON schema file or inline JSON schema") from None
    try:
        return RequestMode(chat_template_kwargs=kwargs, response_format=fmt, temperature=temperature,
                           top_p=1.0 if top_p is None else top_p)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, RequestMode, "request mode flags")) from None
