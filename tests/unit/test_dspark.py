"""DSpark end to end on the tiny target: ModelOpt's ``dflash`` mode with ``projector_type: dspark`` trains, the
DSparkExporter writes the head, doctor is clean, our runtime decodes losslessly, and our runtime proposes exactly
the drafts ModelOpt's own module does (DSpark and plain DFlash)."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.tiny import write_conversations
from trtllm_spec.core.recipe_load import recipe_from_dict

BLOCK = 4
RANK = 16


def _recipe(target: Path, data: Path | None = None, **drafter):
    training = {"max_steps": 4, "batch_size": 2, "seq_len": 64, "lr": 3e-3, "warmup_steps": 1, "checkpoint_every": 2,
                "precision": "fp32", "data": {"path": str(data or "unused.jsonl"), "eval_fraction": 0.25}}
    d = {"type": "dspark", "num_layers": 2, "block_size": BLOCK, "mask_token": 3, "markov_rank": RANK,
         "training": training} | drafter
    if d["type"] != "dspark":
        d.pop("markov_rank")
    return recipe_from_dict({"name": "tiny", "target": {"model": str(target)}, "drafter": d})


@pytest.fixture(scope="module")
def dspark_run(tiny_target, tmp_path_factory):
    from trtllm_spec.stages.drafter import run_train

    convs = write_conversations(tmp_path_factory.mktemp("data") / "c.jsonl", 24)
    out = tmp_path_factory.mktemp("dspark") / "train"
    return out, run_train(_recipe(tiny_target, convs), out, log=lambda m: None)


def test_dspark_trains_and_exports_the_head(dspark_run):
    from safetensors.torch import load_file

    out, res = dspark_run
    cfg = json.loads((res.drafter_dir / "config.json").read_text())
    dc = cfg["dflash_config"]
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == BLOCK
    assert dc["projector_type"] == "dspark" and dc["markov_rank"] == RANK and dc["markov_head_type"] == "vanilla"
    assert dc["shift_label"] is True and dc["mask_token_id"] == 3
    w = load_file(str(res.drafter_dir / "model.safetensors"))
    assert w["markov_w1.weight"].shape == (256, RANK) and w["markov_w2.weight"].shape == (256, RANK)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4] and all(r["loss"] > 0 for r in log)
    assert json.loads((out / "train_summary.json").read_text())["drafter"] == "dspark"


def test_dspark_doctor_clean(dspark_run, tiny_target):
    from trtllm_spec.train.doctor import run_doctor

    _, res = dspark_run
    kind, findings = run_doctor(res.drafter_dir, tiny_target, json.loads((tiny_target / "config.json").read_text()))
    assert kind == "dspark" and not [f for f in findings if f.level == "error"], findings


def test_dspark_runtime_lossless(dspark_run, tiny_target):
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    _, res = dspark_run
    target = LlamaModel.from_pretrained(tiny_target)
    kind, drafter = load_runtime_drafter(str(res.drafter_dir), target, expect="dspark")
    assert kind == "dspark" and drafter.markov is not None
    assert drafter.max_draft_len == BLOCK  # next-token alignment: the anchor's position drafts too
    for prompt in _prompts(3):
        for d in (1, 3, BLOCK):
            out, stats = speculative_generate(target, drafter, prompt, 30, d, eos_ids=(2,))
            assert out == generate(target, prompt, 30, (2,))
            assert max(stats.proposed) == d


# ---- parity with ModelOpt's own module ---------------------------------------------------------------------------

def _modelopt_and_runtime(tiny_target: Path, folder: Path, kind: str):
    """A converted model with random (large) drafter weights, exported in fp32, and our runtime over the export."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.dflash.runtime import DFlashDrafter
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.export import export_drafter

    cfg = json.loads((tiny_target / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    ms.convert(model, cfg, _recipe(tiny_target, type=kind).drafter, mask_token_id=3)
    torch.manual_seed(0)
    with torch.no_grad():  # an untrained drafter's outputs barely depend on its input; make them decisive
        for p in model.dflash_module.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.uniform_(0.5, 2.0)
    shutil.rmtree(folder, ignore_errors=True)
    export_drafter(model, folder, "fp32", {})
    model.eval()
    target = LlamaModel.from_pretrained(tiny_target)
    return model, target, DFlashDrafter(folder, target)


def _contexts(n: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(7, 256, (1, 9 + 4 * i), generator=g) for i in range(n)]


def _runtime_drafts(target, drafter, ids: torch.Tensor) -> tuple[int, list[int]]:
    logits, aux, _ = target.forward(ids, torch.tensor([0]), target.new_cache(1, 128), capture=drafter.capture,
                                    logits="last")
    first = int(logits[0, -1].argmax())
    drafter.reset(ids[0].tolist(), first, aux)
    return first, drafter.propose(drafter.max_draft_len)[0]


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_runtime_drafts_equal_modelopt(tiny_target, tmp_path, kind):
    """Same context -> the same anchor and the same argmax drafts as ModelOpt's ``pseudo_speculative_generate``
    (DFlash: block positions 1..B-1; DSpark: positions 0..B-1 with the Markov bias of the token chosen before)."""
    model, target, drafter = _modelopt_and_runtime(tiny_target, tmp_path / kind, kind)
    assert drafter.max_draft_len == (BLOCK if kind == "dspark" else BLOCK - 1)
    for ids in _contexts():
        first, drafts = _runtime_drafts(target, drafter, ids)
        base, ref = model.pseudo_speculative_generate(ids, steps=drafter.max_draft_len)
        assert first == int(base) and drafts == ref[0].tolist()


def test_dspark_parity_depends_on_the_markov_head(tiny_target, tmp_path):
    """The parity above is not vacuous: dropping the Markov bias, or DFlash's alignment (positions 1..B-1),
    changes the drafts ModelOpt proposes."""
    model, target, drafter = _modelopt_and_runtime(tiny_target, tmp_path / "dspark", "dspark")
    refs = [model.pseudo_speculative_generate(ids, steps=BLOCK)[1][0].tolist() for ids in _contexts()]
    markov = drafter.markov
    drafter.markov = None
    assert [_runtime_drafts(target, drafter, ids)[1] for ids in _contexts()] != refs
    drafter.markov, drafter.shift = markov, False
    drafter.max_draft_len = BLOCK - 1
    unshifted = [_runtime_drafts(target, drafter, ids)[1] for ids in _contexts()]
    assert all(len(u) == BLOCK - 1 for u in unshifted) and unshifted != [r[:BLOCK - 1] for r in refs]


# ---- the maximum draft length, end to end: DSpark drafts block_size, DFlash block_size - 1 -----------------------
# (ModelOpt 0.47 hf_dspark.py / modeling_dspark.py: shift_label; TensorRT-LLM dspark.py: block_size must equal
# max_draft_len -- cited on trtllm_spec.drafters.dspark.DSpark)

def test_recipe_validation_allows_dspark_full_block(tiny_target):
    from trtllm_spec.errors import RecipeError

    assert _recipe(tiny_target).drafter.max_draft_len == BLOCK
    ok = recipe_from_dict({**_recipe(tiny_target).model_dump(mode="json"), "draft_len": BLOCK})
    assert ok.draft_len == BLOCK
    with pytest.raises(RecipeError, match=rf"block_size = {BLOCK}\); raise drafter.block_size"):
        recipe_from_dict({**_recipe(tiny_target).model_dump(mode="json"), "draft_len": BLOCK + 1})
    dflash = _recipe(tiny_target, type="dflash").model_dump(mode="json")
    with pytest.raises(RecipeError, match=rf"block_size - 1 = {BLOCK - 1}"):
        recipe_from_dict({**dflash, "draft_len": BLOCK})


@pytest.mark.parametrize("kind,most", [("dspark", BLOCK), ("dflash", BLOCK - 1)])
def test_plan_searches_up_to_the_block_drafts(tiny_target, kind, most):
    from trtllm_spec.stages.plan import compute_plan

    data = _recipe(tiny_target, type=kind).model_dump(mode="json")
    data["planner"] = {"max_draft_len": 8, "compare_mechanisms": False}
    plan = compute_plan(recipe_from_dict(data))[0].to_json()
    ds = {c["draft_len"] for c in plan["candidates"] if c["mechanism"] == kind}
    assert max(ds) == most and plan["recommendation"]["max_draft_len"] <= most


def test_measure_accepts_the_full_block_and_refuses_more(dspark_run, tiny_target, tiny_suite, cli, tmp_path):
    _, res = dspark_run
    args = ("measure", "reference", "--target", tiny_target, "--drafter", res.drafter_dir, "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "8", "--device", "cpu", "--json")
    r = cli(*args, "--draft-len", str(BLOCK))
    assert r.exit_code == 0, r.output
    prof = json.loads(r.stdout)
    assert prof["drafter"]["draft_len"] == BLOCK and prof["drafter"]["max_draft_len"] == BLOCK
    bad = cli(*args, "--draft-len", str(BLOCK + 1))
    assert bad.exit_code == 2 and f"block_size = {BLOCK}" in bad.output


def test_build_measures_at_the_full_block(dspark_run, tiny_target, tmp_path):
    """The build's measure stage asks the descriptor: D = min(block_size, planner.max_draft_len)."""
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.stages.context import BuildContext
    from trtllm_spec.stages.measure import measure_draft_len

    recipe = _recipe(tiny_target)
    ctx = BuildContext(recipe=recipe, recipe_file=tmp_path / "r.yaml", bundle=tmp_path, cache=None, force=False,
                       log=print, target=resolve_target(str(tiny_target)))
    assert measure_draft_len(ctx) == BLOCK
