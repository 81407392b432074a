"""Strict pydantic base and readable validation errors.

Principle 1 (TensorRT-LLM's ``StrictBaseModel``): unknown keys are errors, and the message names the key
path and the nearest valid key.
"""

from __future__ import annotations

import difflib
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

# A schema string may reach a generated script (its comments too), a path or a job name: none may hold a control
# character (a newline in a '# comment' line ends the comment and runs the rest as a command). Fields whose text
# is free prose (a recipe's description) opt out with ``json_schema_extra=MULTILINE``; nothing they hold is
# written into a script.
MULTILINE = {"multiline": True}
NAME_CHARS = "letters, digits, '_', '.' and '-' (not starting with '.' or '-')"


def control_character(value: Any) -> str | None:
    """The first control character (as U+XXXX) in a string, or in the strings of a list/dict value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            bad = next((c for c in v if ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029"), None)
            if bad is not None:
                return f"U+{ord(bad):04X}"
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return None


def _name(value: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", value):
        raise ValueError(f"a name becomes a folder (out/<name>) and a job name: use 1-128 {NAME_CHARS}, no path "
                         "separators or spaces")
    return value


# a recipe's ``name``: one path component, also a SLURM job name
SafeName = Annotated[str, AfterValidator(_name)]


class StrictModel(BaseModel):
    """Base of every user-facing schema: unknown keys rejected, assignments validated, and no string with a control
    character (every field of every section inherits the check)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="after")
    @classmethod
    def _one_line(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and field.json_schema_extra == MULTILINE:
            return value
        bad = control_character(value)
        if bad is not None:
            raise ValueError(f"holds the control character {bad} (newlines, tabs and other control characters are refused): recipe strings are written into "
                             "scripts, comments and paths, so each must be one line of printable text; remove it")
        return value


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every BaseModel class inside an annotation (Optional, Union, Annotated, list[...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_models_in(arg))
    return out


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, type[BaseModel] | None]:
    """Turn pydantic's error location into a user path, and find the model owning the last key.

    Tagged unions put the tag into the location (``drafter.eagle3.num_layers``); it is dropped here.
    """
    parts: list[str] = []
    current: type[BaseModel] | None = model
    candidates: list[type[BaseModel]] = []
    for i, item in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        if current is None and candidates:
            tagged = [c for c in candidates if _tag_of(c) == item]
            if tagged:
                current, candidates = tagged[0], []
                continue
        parts.append(("." if parts else "") + str(item))
        if last:
            break
        field = current.model_fields.get(str(item)) if current is not None else None
        if field is None:
            current = None
            continue
        models = _models_in(field.annotation)
        if len(models) == 1:
            current, candidates = models[0], []
        else:
            current, candidates = None, models
    return "".join(parts) or "<root>", current


def _union_members(model: type[BaseModel], loc: tuple[Any, ...]) -> list[type[BaseModel]]:
    """The members of the tagged union found at ``loc``."""
    current: type[BaseModel] | None = model
    for item in loc[:-1]:
        field = current.model_fields.get(str(item)) if current is not None else None
        models = _models_in(field.annotation) if field is not None else []
        current = models[0] if len(models) == 1 else None
    field = current.model_fields.get(str(loc[-1])) if current is not None and loc else None
    return _models_in(field.annotation) if field is not None else []


def _tag_of(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("type")
    return field.default if field is not None else None


def format_validation_error(exc: ValidationError, model: type[BaseModel], source: str) -> str:
    """One line per problem: ``source: key.path: what is wrong (allowed ...; fix ...)``."""
    lines: list[str] = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        path, holder = _walk(model, loc)
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            valid = sorted(holder.model_fields) if holder is not None else []
            near = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            allowed = f" Valid keys here: {', '.join(valid)}." if valid else ""
            lines.append(f"{source}: unknown key '{path}'{hint}{allowed}")
        elif kind == "union_tag_invalid":
            ctx = err.get("ctx", {})
            lines.append(
                f"{source}: {path}.{ctx.get('discriminator', 'type').strip(chr(39))}: unknown value "
                f"{ctx.get('tag')!r}; valid: {ctx.get('expected_tags')}"
            )
        elif kind == "union_tag_not_found":
            tags = [_tag_of(m) for m in _union_members(model, loc)]
            valid = f" (one of {', '.join(map(str, tags))})" if tags else ""
            lines.append(f"{source}: {path}: the 'type' key is missing; set {path}.type{valid}")
        elif kind == "missing":
            lines.append(f"{source}: {path}: required field is missing; add it")
        else:
            value = err.get("input")
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            got = ""
            if not isinstance(value, dict | list) or len(repr(value)) <= 60:
                shown = repr(value)
                got = f" (got {shown[:57] + '...' if len(shown) > 60 else shown})"
            if isinstance(value, dict) and kind == "value_error":
                got = ""
            where = "" if path == "<root>" else f"{path}: "
            lines.append(f"{source}: {where}{msg}{got}")
    return "\n".join(lines)
