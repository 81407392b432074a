"""Reading user files defensively and writing outputs atomically.

Bad input never produces a traceback or a half-written output: readers raise ``UserError`` naming the file;
writers build in a temporary sibling and rename at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtllm_spec.errors import OutputExistsError, UserError

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_YAML_ALIASES = 64
MAX_NESTING = 32
MAX_FLOW_DEPTH = 200  # PyYAML's scanner slows down steeply with [[[...]]] nesting: 20000 levels took 45 s


def read_text(path: Path, what: str, error: type[UserError] = UserError, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    if not path.exists():
        raise error(f"{what} {path} does not exist; check the path")
    if path.is_dir():
        raise error(f"{what} {path} is a directory; give a file")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{what} {path} is {size} bytes, more than the {max_bytes} allowed; is it the right file?")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror}") from None


def read_structured(path: Path, what: str, error: type[UserError] = UserError) -> Any:
    """Parse a JSON or YAML file (by suffix; YAML otherwise) with limits on aliases and depth."""
    text = read_text(path, what, error)
    if not text.strip():
        raise error(f"{what} {path} is empty")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    else:
        data = parse_yaml(text, f"{what} {path}", error)
    _check_depth(data, f"{what} {path}", error)
    return data


def parse_yaml(text: str, where: str, error: type[UserError] = UserError) -> Any:
    import yaml

    if _flow_depth_exceeds(text, MAX_FLOW_DEPTH):
        raise error(f"{where} is nested too deeply to parse (more than {MAX_FLOW_DEPTH} levels of [ or {{)")
    try:
        aliases = sum(1 for ev in yaml.parse(text, Loader=yaml.SafeLoader) if isinstance(ev, yaml.AliasEvent))
        if aliases > MAX_YAML_ALIASES:
            raise error(f"{where} uses {aliases} YAML aliases (limit {MAX_YAML_ALIASES}); expand them by hand")
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{where} is not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise error(f"{where} is nested too deeply to parse") from None


def _flow_depth_exceeds(text: str, limit: int) -> bool:
    """Whether YAML flow collections ([ and {) nest deeper than ``limit``, from a cheap scan before parsing
    (quoted scalars and comments skipped)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, quote, escaped, comment, last, prev = 0, "", False, False, "\n", "\n"
    for ch in text:
        if comment:
            comment = ch != "\n"
            last = "\n"
        elif quote:
            if escaped:
                escaped = False
            elif quote == '"' and ch == "\\":
                escaped = True
            elif ch == quote:
                quote, last = "", ch
        elif ch == "#" and prev in " \t\n":
            comment = True
        elif ch in "\"'" and last in "\n:,[{-?":  # a quoted scalar starts only where a scalar can start
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
            last = ch
        elif ch in "]}":
            depth, last = max(0, depth - 1), ch
        elif ch not in " \t\r":
            last = ch
        prev = ch
    return False


def _check_depth(data: Any, where: str, error: type[UserError]) -> None:
    stack = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise error(f"{where} is nested more than {MAX_NESTING} levels deep; that is not a valid file here")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor shapes from a safetensors header (nothing else is read); UserError when the file is truncated,
    corrupt or not safetensors."""
    def bad(why: str) -> UserError:
        return UserError(f"{path} is not a readable safetensors file ({why}); re-export or re-fetch it")

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            n = int.from_bytes(raw, "little") if len(raw) == 8 else -1
            if not 2 <= n <= min(size - 8, 100_000_000):
                raise bad("bad header length")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as exc:
        raise UserError(f"{path} cannot be read: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("the header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("the header is not a table")
    shapes, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            shapes[name] = [int(d) for d in info["shape"]]
            end = max(end, int(info["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            raise bad(f"entry {name!r} has no shape or offsets") from None
    if 8 + n + end > size:
        raise bad(f"truncated: the header needs {8 + n + end} bytes, the file has {size}")
    return shapes


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs get the user's usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


# What every trtllm-spec output folder holds at its top (the "is this ours" check of ``--force``): a bundle's
# manifest, the provenance of plan / measure / served / train / convert outputs, a replan's summary, a Triton
# repository's launcher, an exported drafter's metadata, a training folder's log, checkpoints or regenerated data
OUTPUT_MARKERS = ("manifest.json", "provenance.json", "replan.md", "launch_triton.sh", "trtllm_spec_drafter.json",
                  "train_log.jsonl", "checkpoints", "data/conversations.jsonl")


def is_our_output(folder: Path) -> bool:
    """Whether ``--force`` may replace ``folder``: empty, or a folder a trtllm-spec command wrote (one of
    ``OUTPUT_MARKERS`` at its top; a ``provenance.json`` / ``manifest.json`` must be a JSON object)."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return True
    for name in OUTPUT_MARKERS:
        p = folder / name
        if name.endswith(".json") and p.is_file() and not p.is_symlink():
            try:
                if isinstance(json.loads(p.read_text(encoding="utf-8")), dict):
                    return True
            except (OSError, ValueError):
                continue
        elif p.exists() and not p.is_symlink():
            return True
    return any((folder / "data").glob("conversations*.jsonl"))  # shards of 'data regenerate --shard I/N' too


def check_output_dir(out: Path, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse an existing output (unless ``force``), an output inside an input, or an unwritable parent; with
    ``force``, a non-empty folder that is not a trtllm-spec output (``is_our_output``) is refused too."""
    try:
        out_abs = out.resolve()
    except (RuntimeError, OSError):  # RuntimeError before Python 3.13
        raise UserError(f"output {out} is a symlink loop (or an unreadable link); choose another --out") from None
    for src in inputs:
        src_abs = Path(src).resolve()
        if src_abs.is_dir() and (out_abs == src_abs or src_abs in out_abs.parents):
            raise UserError(f"output folder {out} is inside the input {src}; choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output {out} exists and is not a folder; choose another --out")
    if out.exists() and any(out.iterdir()) and not force:
        raise OutputExistsError(f"output folder {out} exists and is not empty; pass --force to replace it")
    if force and out.is_dir() and not is_our_output(out):
        raise OutputExistsError(f"output folder {out} is not empty and is not a trtllm-spec output (it holds none of "
                                f"{', '.join(OUTPUT_MARKERS[:3])}, ...); --force replaces only our own outputs: "
                                "choose another --out, or empty the folder yourself")
    parent = out_abs.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"cannot write under {parent}: it is a file, not a folder; choose another --out")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write under {parent} (permission denied); choose another --out")


@contextlib.contextmanager
def atomic_dir(out: Path, force: bool = False, inputs: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Yield a temporary folder next to ``out``; on success it replaces ``out``, on failure it vanishes."""
    check_output_dir(out, force, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    except OSError as exc:
        raise UserError(f"cannot write under {out.parent} ({exc.strerror}); choose another --out") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a bundle gets the user's usual permissions
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
