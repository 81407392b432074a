"""The Triton CPU preview serves every mechanism and release a bundle can hold (issue 46): one cell per registered
mechanism (``drafters.registry.MECHANISMS``) x registered TensorRT-LLM release (``core.releases.RELEASES``). Each
cell builds a bundle of a tiny random target with ``trtllm-spec build`` (drafters trained for two steps, the stage
cache shared by the cells, so a drafter is trained once for all releases) and either

- the build refuses it for a reason the records declare (the drafter section needs a later release, the
  descriptor's ``build_refusal`` / ``trtllm_refusal``), or
- the preview's worker (``deploy/triton_worker.Engine``, what ``model.py`` runs) loads it with the bundle's own
  drafter at the bundle's D and serves a greedy request whose text equals target-only greedy decoding.

The draft-model bundle of the default release (what ``engine.trtllm_version: auto`` picks) is also served through
a real tritonserver (the nvidia-pytriton wheel's, ``scripts/setup.sh --dev``): the case issue 46 found refused.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_suite_items
from trtllm_spec.core import releases
from trtllm_spec.drafters.registry import MECHANISMS

PROMPT = "w1 w2 w3 w4 w1 w2 w3"
MAX_TOKENS = 10
CELLS = [(m, r) for m in MECHANISMS for r in releases.RELEASES]


def _section(name: str, data: Path, draft: Path) -> dict:
    """The drafter section of ``name`` for the tiny target, from its recipe class's fields (sizes a tiny target
    takes; a mechanism added later gets the same treatment by the fields it has)."""
    from trtllm_spec.core.recipe import DRAFTER_CLASSES

    cls = next(c for c in DRAFTER_CLASSES if c.model_fields["type"].default == name)
    fields = cls.model_fields
    section: dict = {"type": name}
    trained = MECHANISMS[name].needs_training
    if trained:
        section["training"] = {"max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32",
                               "checkpoint_every": 2, "data": {"path": str(data), "eval_fraction": 0.25}}
    if "draft_vocab_size" in fields:
        section["draft_vocab_size"] = 64
    if "num_layers" in fields and trained:
        section["num_layers"] = 1
    if "block_size" in fields:
        section.update(block_size=4, mask_token=3)
    if "model" in fields:
        section["model"] = str(draft)
    return section


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from tests.tiny import write_conversations, write_model

    tmp = tmp_path_factory.mktemp("preview-cells")
    return {"tmp": tmp, "target": write_model(tmp / "target", init=0.5),
            "draft": write_model(tmp / "draft", layers=2, seed=1, init=0.5),
            "data": write_conversations(tmp / "c.jsonl", 16), "cache": tmp / "cache"}


def build_cell(inputs: dict, mechanism: str, release: str):
    """(exit code, output, bundle folder) of ``trtllm-spec build`` for one cell."""
    from click.testing import CliRunner

    import trtllm_spec.data.suite as suite
    from trtllm_spec.cli import main

    section = _section(mechanism, inputs["data"], inputs["draft"])
    from trtllm_spec.core.recipe import DRAFTER_CLASSES

    cls = next(c for c in DRAFTER_CLASSES if c.model_fields["type"].default == mechanism)
    only = MECHANISMS[mechanism].only_draft_len(cls.model_validate(section))
    recipe = {"name": f"cell-{mechanism}", "target": {"model": str(inputs["target"])}, "draft_len": only or 2,
              "drafter": section, "engine": {"trtllm_version": release}, "hardware": {"gpu": "l40s"},
              "workload": {"batch_sizes": [1], "isl": 64, "osl": 32}, "planner": {"max_draft_len": only or 4},
              "measure": {"num_prompts": 1, "max_new_tokens": 8, "categories": ["coding"]}}
    folder = inputs["tmp"] / f"{mechanism}-{release}"
    (folder.parent / f"{folder.name}.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRTLLM_SPEC_CACHE", str(inputs["cache"]))
        mp.setattr(suite, "build_suite", lambda name="speed-lite", categories=None, num_prompts=10, seed=0, **kw:
                   tiny_suite_items(categories, 1))
        r = CliRunner().invoke(main, ["build", str(folder.parent / f"{folder.name}.yaml"), "--out", str(folder)],
                               catch_exceptions=False)
    return r.exit_code, r.output, folder


def declared_refusal(mechanism: str, release: str, section: dict, target: Path) -> str | None:
    """Why the records say a bundle of this cell cannot exist (None: it can)."""
    from trtllm_spec.core.recipe import DRAFTER_CLASSES
    from trtllm_spec.core.shape import shape_from_config

    cls = next(c for c in DRAFTER_CLASSES if c.model_fields["type"].default == mechanism)
    cfg = cls.model_validate(section)
    if releases.order(release) < releases.order(cfg.required_trtllm()):
        return f"needs TensorRT-LLM {cfg.required_trtllm()}"
    mech = MECHANISMS[mechanism]
    refusal = mech.build_refusal(cfg, shape_from_config(json.loads((target / "config.json").read_text())))
    if refusal is not None:
        return refusal[0]
    return mech.trtllm_refusal(cfg, release)


@pytest.fixture(scope="module")
def target_greedy(inputs):
    """Target-only greedy text of PROMPT (runtime.generate on the tiny target)."""
    import torch
    from transformers import AutoTokenizer

    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    target = LlamaModel.from_pretrained(inputs["target"], dtype=torch.float32, device="cpu")
    tok = AutoTokenizer.from_pretrained(inputs["target"])
    eos = tuple(target.cfg.eos_token_ids) + ((tok.eos_token_id,) if tok.eos_token_id is not None else ())
    return tok.decode(generate(target, tok(PROMPT).input_ids, MAX_TOKENS, eos), skip_special_tokens=True)


def serve_once(bundle: Path, request: dict) -> tuple[dict, list[dict]]:
    """The worker's Engine on ``bundle`` (what model.py starts): (its info, the events of one request)."""
    from trtllm_spec.deploy.triton_worker import Engine

    engine = Engine(bundle)
    events: list[dict] = []
    engine.run(request, events.append)
    return engine.info, events


def test_cells_are_drawn_from_the_records():
    assert {m for m, _ in CELLS} == set(MECHANISMS) and {r for _, r in CELLS} == set(releases.RELEASES)
    assert len(CELLS) == len(MECHANISMS) * len(releases.RELEASES)


@pytest.mark.parametrize("mechanism, release", CELLS)
def test_preview_serves_every_bundle_a_build_can_hold(inputs, target_greedy, mechanism, release):
    section = _section(mechanism, inputs["data"], inputs["draft"])
    why = declared_refusal(mechanism, release, section, inputs["target"])
    code, output, bundle = build_cell(inputs, mechanism, release)
    if why is not None:
        assert code == 2, f"the records refuse this cell ({why}) but build exited {code}: {output[-2000:]}"
        return
    assert code == 0, output[-3000:]
    from trtllm_spec.core.bundle import read_bundle

    record = read_bundle(bundle)
    assert (record.profile, record.drafter) == (release, mechanism)
    spec = record.main_options.get("speculative_config") or {}
    assert spec, f"the {mechanism} bundle does not speculate: the cell would serve the target alone"
    if not MECHANISMS[mechanism].folderless:  # the drafter folder the options name, under the release's key
        key = releases.get(release).spelling["draft_model_key"]
        assert record.drafter_dir is not None and record.drafter_dir == bundle / spec[key]
    info, events = serve_once(bundle, {"id": 0, "text": PROMPT, "max_tokens": MAX_TOKENS, "stream": True})
    assert info["kind"] == mechanism and info["draft_len"] == spec["max_draft_len"] > 0
    assert len(set(target_greedy.split())) > 3  # the tiny target's text varies: equality means something
    assert events[-1]["final"] and events[-1]["text"] == target_greedy
    assert all(target_greedy.startswith(e["text"]) for e in events)
    if not MECHANISMS[mechanism].folderless:  # a model-free drafter proposes only where the text repeats itself,
        assert events[-1]["drafted"] > 0  # which a random target's does not; a model always proposes


# ---- the draft-model bundle of the default release through a real tritonserver ----------------------------------

@pytest.fixture
def deadline():
    def expired(*_):
        raise TimeoutError("the real-Triton draft-model test ran past its 600 s deadline")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 600)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def test_draft_model_bundle_of_the_default_release_streams_greedy_through_real_triton(inputs, target_greedy,
                                                                                       tmp_path, deadline):
    from trtllm_spec.errors import DependencyMissing
    from trtllm_spec.serve.triton import TritonServer, find_triton

    try:
        find_triton()
    except DependencyMissing as exc:
        pytest.skip(f"no Triton venv here ({exc}); scripts/setup.sh --dev installs it")
    from tests.unit.test_triton_serve import client_snippet
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.stages.triton import triton_from_bundle

    auto = recipe_from_dict({"name": "x", "target": {"model": str(inputs["target"])},
                             "drafter": _section("draft_model", inputs["data"], inputs["draft"])}).trtllm_profile
    code, output, bundle = build_cell(inputs, "draft_model", "auto")
    assert code == 0, output[-3000:]
    record = read_bundle(bundle)
    assert record.profile == auto and record.drafter == "draft_model"
    assert releases.get(auto).spelling["draft_model_key"] in record.main_options["speculative_config"]
    repo = tmp_path / "triton"
    triton_from_bundle(bundle, repo, force=False, model_name="tensorrt_llm", preview="reference")
    with TritonServer(repo, log_file=tmp_path / "triton.log") as srv:
        steps = client_snippet()["stream_grpc"](srv.grpc_url, PROMPT, MAX_TOKENS, timeout_s=120)
    assert steps[-1] == (target_greedy, True) and not any(final for _, final in steps[:-1])
    assert len(steps) >= 2


def test_a_bundle_whose_drafter_the_reference_decoder_cannot_run_is_refused_naming_why(tmp_path):
    """MTP runs the target's own MTP layers (a DeepSeek target): a bundle can hold it, the reference decoder cannot
    run it (the measure stage defers it too), so the preview refuses it in one line before loading any weights."""
    from tests.bundle_fakes import seal_bundle
    from trtllm_spec.deploy.triton_worker import load_bundle
    from trtllm_spec.errors import UserError

    bundle = tmp_path / "mtp"
    (bundle / "target").mkdir(parents=True)
    (bundle / "target" / "config.json").write_text(json.dumps({"model_type": "deepseek_v3"}))
    release = releases.get("1.3")
    key = release.spelling["mtp_draft_len_key"]
    (bundle / "llm_api_options.yaml").write_text(f"# TensorRT-LLM {release.name} LLM API options\n" + yaml.safe_dump(
        {"max_batch_size": 1, "speculative_config": {"decoding_type": "MTP", key: 2}}))
    seal_bundle(bundle, recipe={"name": "mtp", "target": {"model": "deepseek-v3"}, "drafter": {"type": "mtp"},
                                "hardware": {"gpu": "h100"}, "engine": {"trtllm_version": release.name}},
                served="target")
    with pytest.raises(UserError, match=r"the bundle's mtp drafter has no folder in .*reference decoder does not run"):
        load_bundle(bundle)
