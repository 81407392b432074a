"""docs/architecture.md's count of comparisons with a drafter-type name outside ``drafters/`` is checked: an ``ast``
walk over every module of the package (``drafters/`` excepted) finds each ``==`` / ``!=`` / ``in`` / ``not in``
against one of the drafter type names, ``"native"`` or a ModelOpt mode name, and the list must equal ALLOWED (the
places the doc names, none of which dispatches on our drafter type). A new branch fails here: put the behaviour on
the descriptor instead (``drafters/base.Mechanism``)."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

PACKAGE = REPO / "trtllm_spec"
# (module, the name compared): what the doc lists, each reading a checkpoint's own layout field
ALLOWED: list[tuple[str, str]] = []  # none: every such comparison is inside a mechanism's package


def _names() -> set[str]:
    from trtllm_spec.core.recipe import DRAFTER_TYPES
    from trtllm_spec.drafters.registry import MECHANISMS

    return {*DRAFTER_TYPES, "native", *(m.modelopt_mode for m in MECHANISMS.values() if m.modelopt_mode)}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for e in node.elts for s in _strings(e)]
    return []


def branches() -> list[tuple[str, str]]:
    names, out = _names(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("drafters/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            if not any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
                continue
            for side in [node.left, *node.comparators]:
                out += [(rel, s) for s in _strings(side) if s in names]
    return sorted(out)


def test_drafter_type_branches_outside_drafters_are_the_documented_ones():
    assert branches() == ALLOWED, "a comparison with a drafter-type name outside drafters/: put it on the descriptor"


def test_the_doc_states_the_count():
    text = " ".join((REPO / "docs" / "architecture.md").read_text().split())
    m = re.search(r"17 at `210113d`, (\d+) now", text)
    assert m and int(m.group(1)) == len(ALLOWED)
