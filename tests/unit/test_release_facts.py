"""Facts written once (issue 46 item 2; docs/architecture.md, "Where facts live"): a TensorRT-LLM release name is
compared or defaulted to only in the release records (``core/releases.py``); what a release spells differently
comes from its record; SA's numbers and the suite names are one constant each; citations name an upstream
repository, path and release or commit, not a search index's id."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trtllm_spec.core import releases

PKG = Path(__file__).resolve().parents[2] / "trtllm_spec"
RELEASE_NAME = re.compile(r"^\d+\.\d+(\.\d+)?$")
# where a release name is data by design: the records themselves; a recipe class's first release (``min_trtllm``,
# docs/architecture.md: "minimum TensorRT-LLM per mechanism")
RECORDS = {"core/releases.py"}
DESIGNATED_FIELDS = {"min_trtllm"}
# a module constant naming a TensorRT-LLM release (not our own __version__ or a wheel's)
RELEASE_CONSTANT = re.compile(r"SINCE|RELEASE|PROFILE|TRTLLM", re.I)


def _is_release(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(RELEASE_NAME.match(node.value))


def release_literals(root: Path = PKG) -> list[str]:
    """Release-name literals used as logic outside the records: compared with, defaulted to, chosen by a
    conditional, or a module-level constant."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in RECORDS:
            continue
        tree = ast.parse(path.read_text(), str(path))
        module_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            hits: list[ast.AST] = []
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else (side,)
                    hits += [e for e in elts if _is_release(e)]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                hits = [d for d in (*node.args.defaults, *node.args.kw_defaults) if _is_release(d)]
            elif isinstance(node, ast.AnnAssign) and _is_release(node.value):
                name = node.target.id if isinstance(node.target, ast.Name) else ""
                hits = [] if name in DESIGNATED_FIELDS else [node.value]
            elif isinstance(node, ast.Assign) and id(node) in module_level and _is_release(node.value) \
                    and any(RELEASE_CONSTANT.search(ast.unparse(t)) for t in node.targets):
                hits = [node.value]
            elif isinstance(node, ast.IfExp):
                hits = [x for x in (node.body, node.orelse) if _is_release(x)]
            elif isinstance(node, ast.BoolOp):
                hits = [x for x in node.values if _is_release(x)]
            out += [f"{rel}:{h.lineno}: {ast.unparse(node)[:90]}" for h in hits]
    return out


def test_no_release_name_is_logic_outside_the_records():
    assert release_literals() == []


def test_the_scan_finds_each_form(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "core").mkdir(parents=True)
    (pkg / "core" / "releases.py").write_text('A = "1.2"\n')  # the records: free
    (pkg / "x.py").write_text('SINCE = "1.3"\n'
                              'def f(profile="1.2"):\n    return 1 if profile == "1.2" else 2\n'
                              'class C:\n    p: str = "1.2"\n    min_trtllm: str = "1.2"\n'
                              'def g(b):\n    return b or "1.4"\n')
    assert sorted(int(h.split(":")[1]) for h in release_literals(pkg)) == [1, 2, 3, 5, 8]


def test_the_planner_default_release_is_what_auto_picks():
    from trtllm_spec.core.recipe import DRAFTER_CLASSES
    from trtllm_spec.planner.plan import PlanRequest

    default = PlanRequest.__dataclass_fields__["trtllm_profile"].default_factory()
    assert default == releases.default_release() == releases.auto_release(releases.names()[0])
    # what auto resolves to for a drafter every release runs: the first release's drafters all agree
    firsts = [c for c in DRAFTER_CLASSES if c.min_trtllm == releases.names()[0]]
    assert firsts and {releases.auto_release(c.min_trtllm) for c in firsts} == {default}
    assert default != releases.names()[0] or len(releases.RELEASES) == 1  # not the oldest: 1.3 since 1.3 is stable


@pytest.mark.parametrize("profile", releases.names())
def test_the_draft_model_key_is_the_records_spelling(profile, monkeypatch):
    from trtllm_spec.drafters.draft_model.config import DraftModelDrafter
    from trtllm_spec.drafters.registry import get

    cfg = DraftModelDrafter(model="smollm2-135m")
    spec = get("draft_model").trtllm_speculative_config(cfg, profile=profile, max_draft_len=4,
                                                         speculative_model="drafter")
    assert spec[releases.get(profile).spelling["draft_model_key"]] == "drafter"
    # the record is the one source: a release spelling it otherwise is written otherwise
    record = releases.get(profile)
    monkeypatch.setitem(releases.RELEASES, profile, type(record)(**{
        **record.__dict__, "spelling": {**record.spelling, "draft_model_key": "speculative_model_path"}}))
    spec = get("draft_model").trtllm_speculative_config(cfg, profile=profile, max_draft_len=4,
                                                         speculative_model="drafter")
    assert spec["speculative_model_path"] == "drafter"


@pytest.mark.parametrize("profile", releases.names())
def test_cuda_graph_max_batch_size_follows_the_record(profile, monkeypatch):
    from trtllm_spec.deploy.trtllm_options import _cuda_graph_config

    record = releases.get(profile)
    graphs = _cuda_graph_config([1, 4], None, None, profile)
    assert ("max_batch_size" in graphs) == record.cuda_graph_max_batch_size
    flipped = type(record)(**{**record.__dict__, "cuda_graph_max_batch_size": not record.cuda_graph_max_batch_size})
    monkeypatch.setitem(releases.RELEASES, profile, flipped)
    assert ("max_batch_size" in _cuda_graph_config([1, 4], None, None, profile)) == flipped.cuda_graph_max_batch_size


def test_sa_first_release_is_the_sa_tags():
    import trtllm_spec.core.sa as sa
    from trtllm_spec.drafters.suffix.config import SuffixDrafter

    assert not hasattr(sa, "SA_SINCE")  # the decoding tag's record says it
    assert sa.sa_since() == releases.DECODING_TAGS["SA"].since == SuffixDrafter.min_trtllm


# SA's numbers: each is one constant of core/sa.py; these definitions read it and repeat no number
SA_READERS = {
    "drafters/suffix/runtime.py": None, "drafters/suffix/sa_enhancer.py": None, "drafters/load.py": None,
    "deploy/trtllm_schema.py": ("SAEnhancer", "_SAFields"), "drafters/suffix/config.py": ("SuffixDrafter",),
}


def _sa_numbers(path: Path, scopes: tuple[str, ...] | None) -> list[str]:
    from trtllm_spec.core.sa import SA_POOL_DEFAULT_SLOTS, SA_POOL_MATCH_CAP, SA_THRESHOLD_DEFAULT

    numbers = {SA_POOL_MATCH_CAP, SA_POOL_DEFAULT_SLOTS, SA_THRESHOLD_DEFAULT}
    tree = ast.parse(path.read_text())
    roots = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in scopes] if scopes else [tree]
    assert roots, f"{path}: none of {scopes}"
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for root in roots:
        for n in ast.walk(root):
            if not isinstance(n, ast.Constant) or id(n) in docstrings:
                continue
            if type(n.value) is int and n.value in numbers:
                out.append(f"{path.name}:{n.lineno}: {n.value}")
            elif isinstance(n.value, str) and re.search(rf"\b({'|'.join(map(str, numbers))}) tokens\b", n.value):
                out.append(f"{path.name}:{n.lineno}: {n.value[:40]!r}")
    return out


@pytest.mark.parametrize("rel", sorted(SA_READERS))
def test_sa_numbers_are_one_constant_each(rel):
    assert _sa_numbers(PKG / rel, SA_READERS[rel]) == []


def test_sa_defaults_come_from_the_constants():
    from trtllm_spec.core.sa import SA_POOL_MATCH_CAP, SA_THRESHOLD_DEFAULT, SAEnhancerConfig
    from trtllm_spec.deploy.trtllm_schema import SAEnhancer

    assert SAEnhancerConfig().threshold == SAEnhancer().threshold == SA_THRESHOLD_DEFAULT
    from trtllm_spec.drafters.suffix.config import SuffixDrafter

    with pytest.raises(ValueError, match=f"1..{SA_POOL_MATCH_CAP}.*at {SA_POOL_MATCH_CAP} tokens"):
        SuffixDrafter(enable_global_pool=True, max_matching_ngram_size=SA_POOL_MATCH_CAP + 1)


# the suite's name: core/suites.py, read by every module (the list of exceptions only shrinks; it is empty)
SUITE_NAME_NOT_YET: set[str] = set()


def test_the_suite_names_are_one_constant():
    from trtllm_spec.core.suites import BUILTIN_SUITES

    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "core/suites.py":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Constant) and n.value in BUILTIN_SUITES:
                found.add(rel)
    assert found <= SUITE_NAME_NOT_YET, sorted(found - SUITE_NAME_NOT_YET)
    assert found == SUITE_NAME_NOT_YET, f"take {sorted(SUITE_NAME_NOT_YET - found)} off SUITE_NAME_NOT_YET"


def test_the_recipe_and_the_builders_use_the_suite_constant():
    from trtllm_spec.core.recipe import MeasureConfig
    from trtllm_spec.core.suites import MODES_SUITE, SUITE_NAME
    from trtllm_spec.data import mode_suite, suite

    assert MeasureConfig().suite == suite.SUITE_NAME == SUITE_NAME
    assert mode_suite.MODES_SUITE == MODES_SUITE


# citations: an upstream repository + path + release or commit; a search index's numeric id is not one
OPAQUE_ID = re.compile(r"\bids?[\s#]+\d{8,}")


def opaque_citations(root: Path = PKG) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        out += [f"{path.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}"
                for m in OPAQUE_ID.finditer(text)]
    return out


def test_no_citation_by_a_search_index_id():
    assert opaque_citations() == []
    docs = PKG.parent / "docs"
    found = [f"docs/{p.name}" for p in sorted(docs.glob("*.md")) if OPAQUE_ID.search(p.read_text())]
    assert found == []


def test_the_citation_scan_sees_a_wrapped_id(tmp_path):
    (tmp_path / "a.py").write_text("# parser (index id\n#  7019226376) and ids 1090804222, 1520735490\nsha = 'id'\n")
    assert opaque_citations(tmp_path) == ["a.py:1: id\n#  7019226376", "a.py:2: ids 1090804222"]
