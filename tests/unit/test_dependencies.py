"""The dependency rule (docs/architecture.md, "The dependency rule"), checked by walking every import of the package
with ast, lazy imports inside functions included: each package has a rank, and a package imports only packages of a
lower rank (never one of its own rank, never a higher one); the module import graph has no cycle. The ranks are
read from docs/architecture.md's table too, so the document and this test cannot drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "trtllm_spec"
DOC = REPO / "docs" / "architecture.md"

# rank -> packages (docs/architecture.md, "The dependency rule"); higher imports lower only. ``errors`` and the
# top-level ``trtllm_spec`` (``__version__``) are below everything. ``serve`` (the server processes we start) sits
# under the components that run a whole step, which start servers, and above the helpers it may use (``data``,
# ``llamacpp``, ``core``); the test holds whether or not the package exists.
RANKS: dict[int, tuple[str, ...]] = {
    8: ("cli",),
    7: ("stages",),
    6: ("measure", "deploy", "train"),
    5: ("drafters", "serve"),
    4: ("llamacpp", "silicon"),
    3: ("data",),
    2: ("runtime",),
    1: ("planner", "report"),
    0: ("core",),
}
RANK = {pkg: rank for rank, pkgs in RANKS.items() for pkg in pkgs}
FREE = {"errors", "__init__", "__main__"}  # errors.py, the top-level package, ``python -m trtllm_spec``
OPTIONAL = {"serve"}  # ranked before it exists

# the upward imports the ranking still has, each with why (an edge here that disappears fails too, so the list
# only shrinks by editing it): module -> module
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(module: str) -> str:
    return module.split(".")[0] if module else "__init__"


def modules(root: Path = PKG) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import of ours in the file, at any depth (functions, ifs, try blocks), with the
    ``trtllm_spec.`` prefix dropped; ``from pkg import mod`` names the module where ``mod`` is one."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "trtllm_spec" and not node.module.startswith("trtllm_spec."):
                continue
            base = node.module.removeprefix("trtllm_spec").removeprefix(".")
            for a in node.names:
                if not base:  # from trtllm_spec import stages (a package), __version__ (the top level's own)
                    out.append((node.lineno, "" if a.name.startswith("__") else a.name))
                    continue
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in known else base))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name.removeprefix("trtllm_spec.")) for a in node.names
                    if a.name.startswith("trtllm_spec.")]
    return out


def edges(root: Path = PKG) -> list[tuple[str, int, str]]:
    mods = modules(root)
    known = set(mods)
    return [(m, line, dst) for m, path in mods.items() for line, dst in imports(path, known) if dst != m]


def rank_violations(root: Path = PKG) -> tuple[list[str], set[tuple[str, str]]]:
    """(violations, the allowed upward edges seen)."""
    found, allowed_seen = [], set()
    for src, line, dst in edges(root):
        a, b = package_of(src), package_of(dst)
        if a == b or b in FREE:
            continue
        if a in FREE:  # the top-level package and __main__ may import cli
            continue
        ra, rb = RANK.get(a), RANK.get(b)
        if ra is None or rb is None:
            found.append(f"trtllm_spec/{src.replace('.', '/')}: {a if ra is None else b} has no rank "
                         "(docs/architecture.md)")
        elif rb >= ra:
            if (src, dst) in UPWARD_ALLOWED:
                allowed_seen.add((src, dst))
                continue
            how = "its own rank" if rb == ra else "a higher rank"
            found.append(f"trtllm_spec/{src.replace('.', '/')}.py:{line}: {a} (rank {ra}) imports {dst} "
                         f"({b}, {how} {rb})")
    return found, allowed_seen


def cycles(root: Path = PKG) -> list[list[str]]:
    """The module import graph's strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {m: set() for m in modules(root)}
    for src, _, dst in edges(root):
        if dst in graph:
            graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_import_points_to_a_lower_rank():
    found, _ = rank_violations()
    assert found == [], "\n".join(found)


def test_the_allowed_upward_imports_are_still_there():
    """An allowed exception that was cut comes off the list (it only shrinks)."""
    _, seen = rank_violations()
    assert seen == set(UPWARD_ALLOWED)


def test_no_import_cycle_not_even_through_function_level_imports():
    assert cycles() == []


def test_every_package_has_a_rank():
    pkgs = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert pkgs - set(RANK) == set()
    assert set(RANK) - pkgs <= OPTIONAL  # a ranked package that is not there yet may only be an optional one


def test_the_ranks_are_those_of_docs_architecture():
    """docs/architecture.md's table of ranks says what RANKS says."""
    text = DOC.read_text()
    section = text[text.index("## The dependency rule"):]
    section = section[:section.index("\n## ", 3)]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M)
    assert rows, "docs/architecture.md: no rank table under 'The dependency rule'"
    doc = {int(r): tuple(sorted(re.findall(r"`(\w+)/?`", pkgs))) for r, pkgs in rows}
    assert doc == {r: tuple(sorted(p)) for r, p in RANKS.items()}
    for (src, dst) in UPWARD_ALLOWED:  # each exception is named in the document
        assert f"{src.replace('.', '/')}" in section and dst in section


# ---- the checks themselves, on a made-up package ---------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "trtllm_spec"
    for rel, src in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        for d in [p.parent, *p.parent.parents]:
            if d == pkg.parent:
                break
            (d / "__init__.py").touch()
        p.write_text(src)
    return pkg


def test_the_walker_catches_a_lazy_upward_import_and_a_same_rank_one(tmp_path):
    pkg = _tree(tmp_path, {
        "runtime/x.py": "def f():\n    from trtllm_spec.train.doctor import drafter_type\n",
        "core/y.py": "from trtllm_spec import stages\n",
        "measure/z.py": "if True:\n    import trtllm_spec.deploy.w\n",
        "data/ok.py": "from trtllm_spec.runtime import x\nfrom trtllm_spec.errors import UserError\n",
    })
    found, _ = rank_violations(pkg)
    assert found == ["trtllm_spec/core/y.py:1: core (rank 0) imports stages (stages, a higher rank 7)",
                     "trtllm_spec/measure/z.py:2: measure (rank 6) imports deploy.w (deploy, its own rank 6)",
                     "trtllm_spec/runtime/x.py:2: runtime (rank 2) imports train.doctor (train, a higher rank 6)"]


def test_an_unranked_package_is_a_violation(tmp_path):
    pkg = _tree(tmp_path, {"newpkg/a.py": "from trtllm_spec.core import b\n", "core/b.py": ""})
    found, _ = rank_violations(pkg)
    assert found == ["trtllm_spec/newpkg/a: newpkg has no rank (docs/architecture.md)"]


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    pkg = _tree(tmp_path, {
        "data/a.py": "def f():\n    from trtllm_spec.data.b import g\n",
        "data/b.py": "def g():\n    from trtllm_spec.data import c\n",
        "data/c.py": "from trtllm_spec.data.a import f\n",
        "data/d.py": "from trtllm_spec.data.a import f\n",
    })
    assert cycles(pkg) == [["data.a", "data.b", "data.c"]]


@pytest.mark.parametrize("pkg", sorted(set(RANK) - OPTIONAL))
def test_every_ranked_package_exists(pkg):
    assert (PKG / pkg).is_dir()
