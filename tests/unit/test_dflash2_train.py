"""DFlash2 training on the tiny target (issue 45 item 3): ModelOpt's ``dflash`` mode with this project's plugin
(``drafters/dflash2/train.py``) trains, the export is z-lab's layout (recognised as DFlash2, doctor clean), our
runtime decodes it losslessly, and the training graph computes what our runtime computes: the convolutions
(ModelOpt's own ``pseudo_speculative_generate`` over the plugin's modules drafts what ``DFlash2Runtime`` drafts from
the export) and the selector (the scores the loss is taken over are the walk's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.tiny import write_conversations
from trtllm_spec.core.recipe_load import recipe_from_dict
from trtllm_spec.errors import RecipeError

BLOCK = 4
HEAD = {"conv_group_size": 8, "selector_rank": 8, "selector_top_k": 6}


def _recipe(target: Path, data: Path | None = None, **drafter):
    training = {"max_steps": 4, "batch_size": 2, "seq_len": 64, "lr": 3e-3, "warmup_steps": 1, "checkpoint_every": 2,
                "precision": "fp32", "data": {"path": str(data or "unused.jsonl"), "eval_fraction": 0.25}}
    d = {"type": "dflash2", "num_layers": 2, "block_size": BLOCK, "mask_token": 3, **HEAD,
         "training": training} | drafter
    if d["type"] != "dflash2":
        d = {k: v for k, v in d.items() if k not in HEAD}
    return recipe_from_dict({"name": "tiny", "target": {"model": str(target)}, "drafter": d})


@pytest.fixture(scope="module")
def dflash2_run(tiny_target, tmp_path_factory):
    from trtllm_spec.stages.drafter import run_train

    convs = write_conversations(tmp_path_factory.mktemp("data") / "c.jsonl", 24)
    out = tmp_path_factory.mktemp("dflash2") / "train"
    return out, run_train(_recipe(tiny_target, convs), out, log=lambda m: None), convs


def test_trains_and_exports_the_zlab_layout(dflash2_run, tiny_target):
    from safetensors.torch import load_file

    from trtllm_spec.drafters.registry import exported_type

    out, res, _ = dflash2_run
    cfg = json.loads((res.drafter_dir / "config.json").read_text())
    assert cfg["architectures"] == ["DFlash2DraftModel"] and "block_size" not in cfg
    want = {"block_size": BLOCK, "mask_token_id": 3, "conv_kernel_size": 2, **HEAD}
    assert cfg["dflash_config"].items() >= want.items()
    assert exported_type(cfg) == "dflash2"
    w = load_file(str(res.drafter_dir / "model.safetensors"))
    h, v, g = 64, 256, HEAD["conv_group_size"]
    for i in range(2):
        for conv in ("attention_conv", "mlp_conv"):
            assert w[f"layers.{i}.{conv}.base_kernel"].shape == (2, 2, h)
            assert w[f"layers.{i}.{conv}.kernel_projection.weight"].shape == (2 * 2 * h // g, h)
    assert w["candidate_selector.hidden_projection.weight"].shape == (8, h)
    for book in ("predecessor", "successor"):
        assert w[f"candidate_selector.{book}_codebook"].shape == (v, 8)
    assert w["candidate_selector.successor_codebook"].abs().sum() > 0  # the selector's loss trained it
    assert not [k for k in w if "embed" in k or "lm_head" in k]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4] and all(r["loss"] > 0 for r in log)
    assert json.loads((out / "train_summary.json").read_text())["drafter"] == "dflash2"


def test_doctor_clean_and_runtime_lossless(dflash2_run, tiny_target):
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train.doctor import run_doctor

    _, res, _ = dflash2_run
    kind, findings = run_doctor(res.drafter_dir, tiny_target, json.loads((tiny_target / "config.json").read_text()))
    assert kind == "dflash2" and not [f for f in findings if f.level == "error"], findings
    target = LlamaModel.from_pretrained(tiny_target)
    kind, drafter = load_runtime_drafter(str(res.drafter_dir), target, expect="dflash2")
    assert kind == "dflash2"
    for prompt in _prompts(3):
        for d in (1, BLOCK - 1):
            out, stats = speculative_generate(target, drafter, prompt, 30, d, eos_ids=(2,))
            assert out == generate(target, prompt, 30, (2,))
            assert max(stats.proposed) == d


def test_resume_continues_the_plugin_parameters(dflash2_run, tiny_target, tmp_path):
    """A checkpoint holds the convolutions and the selector (trainable tensors of the draft module): resuming from
    step 2 of the same run ends with the same tensors as the run that did not stop."""
    from safetensors.torch import load_file

    from trtllm_spec.stages.drafter import run_train

    out, res, convs = dflash2_run
    again = tmp_path / "train"
    shutil.copytree(out, again)
    shutil.rmtree(again / "drafter")
    ckpts = again / "checkpoints"
    shutil.rmtree(ckpts / "step-0000004")  # keep step 2 only
    (ckpts / "latest").write_text("step-0000002\n")
    res2 = run_train(_recipe(tiny_target, convs), again, resume=True, log=lambda m: None)
    a = load_file(str(res.drafter_dir / "model.safetensors"))
    b = load_file(str(res2.drafter_dir / "model.safetensors"))
    for k in ("candidate_selector.successor_codebook", "layers.1.mlp_conv.kernel_projection.weight"):
        assert torch.equal(a[k], b[k]), k


# ---- the training graph computes what the runtime computes -------------------------------------------------------

def _converted(tiny_target: Path, folder: Path, successor: bool):
    """A model converted and extended by the plugin with random (large) drafter weights, exported in fp32."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.registry import get
    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.export import export_drafter

    recipe = _recipe(tiny_target)
    cfg = json.loads((tiny_target / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    ms.convert(model, cfg, recipe.drafter, mask_token_id=3)
    torch.manual_seed(0)
    with torch.no_grad():  # an untrained drafter's outputs barely depend on its input; make them decisive
        for name, p in model.dflash_module.named_parameters():
            if "successor" in name and not successor:
                continue
            p.normal_(0, 0.3) if p.dim() > 1 else p.uniform_(0.5, 2.0)
    shutil.rmtree(folder, ignore_errors=True)
    export_drafter(model, folder, "fp32", {}, finish_config=lambda c: get("dflash2").exported_config(c, recipe.drafter))
    model.eval()
    return model


def _contexts(n: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(7, 256, (1, 9 + 4 * i), generator=g) for i in range(n)]


def _runtime(tiny_target: Path, folder: Path):
    from trtllm_spec.drafters.dflash2.runtime import DFlash2Runtime
    from trtllm_spec.runtime.llama import LlamaModel

    target = LlamaModel.from_pretrained(tiny_target)
    return target, DFlash2Runtime(folder, target)


def _runtime_drafts(target, drafter, ids: torch.Tensor) -> tuple[int, list[int]]:
    logits, aux, _ = target.forward(ids, torch.tensor([0]), target.new_cache(1, 128), capture=drafter.capture,
                                    logits="last")
    first = int(logits[0, -1].argmax())
    drafter.reset(ids[0].tolist(), first, aux)
    return first, drafter.propose(BLOCK - 1)[0]


def test_convolutions_draft_what_the_runtime_drafts(tiny_target, tmp_path):
    """Random convolutions, a zero successor codebook (the walk is then the argmax of the logits): ModelOpt's own
    block generator over the plugin's layers drafts exactly what our runtime drafts from the export."""
    model = _converted(tiny_target, tmp_path / "h", successor=False)
    target, drafter = _runtime(tiny_target, tmp_path / "h")
    for ids in _contexts():
        first, drafts = _runtime_drafts(target, drafter, ids)
        base, ref = model.pseudo_speculative_generate(ids, steps=BLOCK - 1)
        assert first == int(base) and drafts == ref[0].tolist()


def test_the_selector_scores_the_loss_uses_are_the_walks(tiny_target, tmp_path):
    """With every selector tensor random, walking the plugin's ``CandidateSelector.scores`` over the draft module's
    hidden states (teacher-forced with the walk's own choices) gives the runtime's drafts; and the selector's loss
    is zero-gradient for the backbone (it learns transitions only)."""
    from trtllm_spec.drafters.dflash2.train import selector_loss

    model = _converted(tiny_target, tmp_path / "h", successor=True)
    target, drafter = _runtime(tiny_target, tmp_path / "h")
    module, seen = model.dflash_module, {}
    module.register_forward_hook(lambda mod, args, out: seen.__setitem__("hidden", out))
    differs = 0
    for ids in _contexts():
        first, drafts = _runtime_drafts(target, drafter, ids)
        _, plain = model.pseudo_speculative_generate(ids, steps=BLOCK - 1)
        hidden = seen["hidden"][0, 1:]
        with torch.no_grad():
            unary, cand = model._base_model_lm_head(hidden).topk(HEAD["selector_top_k"], dim=-1)
            walk, prev = [], first
            for j in range(BLOCK - 1):
                s = module.candidate_selector.scores(unary[j], cand[j], torch.tensor(prev), hidden[j])
                prev = int(cand[j, int(s.argmax())])
                walk.append(prev)
        assert walk == drafts
        differs += walk != plain[0].tolist()
    assert differs  # the selector changed some drafts: the comparison above is not the argmax's
    # the backbone gets no gradient from the selector's loss
    model.train()
    ids = torch.randint(7, 256, (2, 4 * BLOCK))
    anchors = torch.tensor([[0, BLOCK], [BLOCK, 2 * BLOCK]])
    hidden = module(model._build_noise_embedding(ids, anchors, torch.ones(2, 2, dtype=torch.bool), 2),
                    torch.randn(2, 4 * BLOCK, 2 * 64), model._build_position_ids(4 * BLOCK, anchors, "cpu"))
    logits = model._base_model_lm_head(hidden)
    rows = (anchors[:, :, None] + torch.arange(1, BLOCK)[None, None]).view(2, -1)
    slots = (torch.arange(2 * BLOCK) % BLOCK > 0).nonzero().view(-1)
    ids.scatter_(1, rows, logits[:, slots].topk(2, dim=-1).indices[..., 1])  # true tokens among the candidates
    loss, _ = selector_loss(module.candidate_selector, hidden, logits, ids, anchors, torch.ones(2, 2, dtype=torch.bool),
                            torch.ones(2, 4 * BLOCK), BLOCK, HEAD["selector_top_k"])
    module.zero_grad()
    loss.backward()
    grads = {n for n, p in module.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads and all(n.startswith("candidate_selector.") for n in grads), grads


def test_a_fresh_head_is_its_dflash_backbone():
    """The trainers' initialisation: identity convolutions, zero successor codebook (scores = the unary logits)."""
    from trtllm_spec.drafters.dflash2.train import CandidateSelector, GroupedDynamicConv

    conv = GroupedDynamicConv(16, 3, 4)
    x, u = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
    taps = conv.taps(x, 4)
    assert torch.equal(conv.filter(u, taps[0]), u) and torch.equal(conv.filter(u, taps[1]), u)
    sel = CandidateSelector(16, 32, 4, 0.02)
    unary, cand = torch.randn(5), torch.randint(0, 32, (5,))
    assert torch.equal(sel.scores(unary, cand, torch.tensor(3), torch.randn(16)), unary)


def test_the_convolution_is_causal_inside_each_block():
    """Changing row i of a block changes no row before it and nothing in the other blocks (taps never reach the
    context or the previous block)."""
    from trtllm_spec.drafters.dflash2.train import GroupedDynamicConv

    torch.manual_seed(0)
    conv = GroupedDynamicConv(16, 2, 4)
    with torch.no_grad():
        conv.base_kernel.normal_()
        conv.kernel_projection.weight.normal_()
    x = torch.randn(1, 12, 16)
    base = conv.filter(x, conv.taps(x, 4)[0])
    y = x.clone()
    y[0, 5] += 1.0  # block 1, row 1
    moved = (conv.filter(y, conv.taps(y, 4)[0]) - base).abs().sum(-1)[0]
    assert moved[5] > 0 and moved[6] > 0
    assert torch.equal(moved[:5], torch.zeros(5)) and torch.equal(moved[8:], torch.zeros(4))


def test_selector_loss_alpha_is_a_training_field(tiny_target, tmp_path):
    base = {"name": "z", "target": {"model": "llama-3.1-8b-instruct"}}
    with pytest.raises(RecipeError, match="selector_loss_alpha = 2.0 only changes training, but "
                                          "drafter.checkpoint reuses"):
        recipe_from_dict({**base, "drafter": {"type": "dflash2", "checkpoint": str(tmp_path),
                                              "selector_loss_alpha": 2.0}})
    with pytest.raises(RecipeError, match="selector_loss_alpha"):
        recipe_from_dict({**base, "drafter": {"type": "dflash2", "selector_loss_alpha": 0}})
    assert recipe_from_dict({**base, "drafter": {"type": "dflash2"}}).drafter.selector_loss_alpha == 1.0


def test_num_anchors_reaches_modelopt_and_is_refused_beside_a_checkpoint(tiny_target, tmp_path):
    """``drafter.num_anchors`` (the DFlash family's): ModelOpt draws at most that many blocks per sequence."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.train import modelopt_setup as ms

    cfg = json.loads((tiny_target / "config.json").read_text())
    for kind in ("dflash", "dflash2"):
        recipe = _recipe(tiny_target, type=kind, num_anchors=5)
        model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
        ms.convert(model, cfg, recipe.drafter, mask_token_id=3)
        anchors, keep = model._sample_anchor_positions(64, torch.ones(2, 64), "cpu")
        assert anchors.shape == (2, 5) and keep.all()
    base = {"name": "z", "target": {"model": "llama-3.1-8b-instruct"}}
    with pytest.raises(RecipeError, match="drafter.num_anchors = 64 only changes training, but drafter.checkpoint"):
        recipe_from_dict({**base, "drafter": {"type": "dflash", "checkpoint": str(tmp_path), "num_anchors": 64}})


@pytest.mark.parametrize("field, value, says", [
    ("conv_group_size", 7, "drafter.conv_group_size 7 does not divide the target's hidden size 64"),
    ("selector_top_k", 300, "drafter.selector_top_k 300 exceeds the target's vocabulary (256)")])
def test_train_refuses_a_head_the_target_cannot_hold(tiny_target, tmp_path, cli, field, value, says):
    import yaml

    recipe = tmp_path / "r.yaml"
    d = _recipe(tiny_target, write_conversations(tmp_path / "c.jsonl", 4)).drafter.model_dump(mode="json")
    recipe.write_text(yaml.safe_dump({"name": "bad", "target": {"model": str(tiny_target)},
                                      "drafter": {**d, field: value}}))
    r = cli("train", recipe, "--out", tmp_path / "out")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"cannot train drafter.type dflash2 for {tiny_target}: {says}" in " ".join(r.output.split())
    assert not (tmp_path / "out").exists()
