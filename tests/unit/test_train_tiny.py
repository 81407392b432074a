"""ModelOpt training on a tiny random target: convert, a few steps, export, doctor, resume, runtime parity."""

import json
from pathlib import Path

import pytest
import torch

from tests.tiny import write_conversations
from trtllm_spec.core.recipe_load import recipe_from_dict


def _recipe(target: Path, data: Path, **drafter):
    training = {"max_steps": 4, "batch_size": 2, "seq_len": 64, "lr": 3e-3, "warmup_steps": 1, "checkpoint_every": 2,
                "precision": "fp32", "data": {"path": str(data), "eval_fraction": 0.25}}
    d = {"type": "eagle3", "num_layers": 1, "draft_vocab_size": 64, "training": training} | drafter
    d = {k: v for k, v in d.items()
         if v is not None and not (d["type"] not in ("eagle3", "eagle_mtp") and k == "draft_vocab_size")}
    return recipe_from_dict({"name": "tiny", "target": {"model": str(target)}, "drafter": d})


@pytest.fixture(scope="module")
def convs(tmp_path_factory):
    return write_conversations(tmp_path_factory.mktemp("data") / "c.jsonl", 24)


@pytest.fixture(scope="module")
def eagle_run(tiny_target, convs, tmp_path_factory):
    from trtllm_spec.stages.drafter import run_train

    out = tmp_path_factory.mktemp("eagle") / "train"
    return out, run_train(_recipe(tiny_target, convs), out, log=lambda m: None)


def test_eagle3_export_layout(eagle_run):
    out, res = eagle_run
    d = res.drafter_dir
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 64
    assert cfg["torch_dtype"] == "bfloat16" and cfg["rope_scaling"] is None
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors", "trtllm_spec_drafter.json"]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 4 and len(summary["train_acc"]) == 3 and summary["draft_vocab_coverage"] > 0.5
    assert (out / "provenance.json").is_file() and (out / "train_log.jsonl").read_text().count("\n") == 4


def test_doctor_healthy_and_cli(eagle_run, tiny_target, cli):
    _, res = eagle_run
    r = cli("doctor", res.drafter_dir, "--target", tiny_target, "--json")
    report = json.loads(r.output)
    assert r.exit_code == 0, r.output
    checks = {f["check"]: f["level"] for f in report["findings"]}
    assert checks["parity"] == "ok" and checks["layout"] == "ok" and checks["d2t"] == "ok"
    # --recipe: a drafter trained with the template's defaults, a recipe serving thinking off: a warning (exit 0)
    recipe = res.drafter_dir.parent / "serve_thinking_off.yaml"
    recipe.write_text("name: r\ntarget: {model: qwen3-8b}\ndrafter: {type: eagle3}\nworkload: {request_mode: "
                      "{chat_template_kwargs: {enable_thinking: false}}}\n")
    r = cli("doctor", res.drafter_dir, "--target", tiny_target, "--recipe", recipe)
    assert r.exit_code == 0 and "[warn] request_mode" in r.output and "enable_thinking" in r.output, r.output


def test_doctor_finds_broken_exports(eagle_run, tiny_target, cli, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    _, res = eagle_run
    bad = tmp_path / "bad"
    shutil.copytree(res.drafter_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["torch_dtype"] = "float32"
    (bad / "config.json").write_text(json.dumps(cfg))
    t = load_file(str(bad / "model.safetensors"))
    t["d2t"] = torch.zeros_like(t["d2t"])  # every draft id maps onto itself... and duplicates after offset 0? no: ids 0..63
    t["d2t"][1] = -1  # draft id 1 -> target 0, colliding with draft id 0
    save_file(t, str(bad / "model.safetensors"))
    r = cli("doctor", bad, "--target", tiny_target)
    assert r.exit_code == 1
    assert "dtype" in r.output and "mapped more than once" in r.output


def test_first_step_counts_are_what_the_decoder_proposes(eagle_run, tiny_target):
    """doctor's parity and benchmarks/first_step_accuracy.py score the teacher-forced first step; at every position
    it must be the decoder's own first proposal (reset on the prefix, propose one), counted as documented."""
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.eagle3.doctor import first_step_counts
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    target = LlamaModel.from_pretrained(tiny_target)
    drafter = Eagle3Drafter(eagle_run[1].drafter_dir, target)
    prompt = _prompts(1)[0]
    ids = prompt + generate(target, prompt, 24)
    _, aux, _ = target.forward(torch.tensor([ids]), torch.tensor([0]), target.new_cache(1, len(ids) + 1),
                               capture=drafter.capture)
    logits, _, _ = target.forward(torch.tensor([ids]), torch.tensor([0]), target.new_cache(1, len(ids) + 1))
    vocab = torch.arange(64) + drafter.d2t
    got, want = [], []
    for j in range(2, len(ids)):  # token j, drafted after the prefix ids[:j]
        got.append(first_step_counts(target, drafter, ids, [int(i == j) for i in range(len(ids))]))
        drafter.reset(ids[:j - 1], ids[j - 1], [a[:, :j - 1] for a in aux])
        proposal, greedy = drafter.propose(1)[0][0], int(logits[0, j - 1].argmax())
        best_inside = int(vocab[logits[0, j - 1, vocab].argmax()])
        want.append((int(proposal == greedy), int(proposal == best_inside), int(greedy in vocab.tolist()), 1))
    assert got == want
    assert 0 < sum(w[1] for w in want) < len(want)  # the per-position check is not vacuous
    assert first_step_counts(target, drafter, ids, [1] * len(ids)) == tuple(map(sum, zip(*want, strict=True)))


def test_resume_equals_uninterrupted(tiny_target, convs, tmp_path, eagle_run):
    from safetensors.torch import load_file

    from trtllm_spec.stages.drafter import run_train

    recipe = _recipe(tiny_target, convs)
    out = tmp_path / "resumed"
    run_train(recipe, out, max_steps=2, log=lambda m: None)
    res = run_train(recipe, out, resume=True, log=lambda m: None)
    a = load_file(str(eagle_run[1].drafter_dir / "model.safetensors"))
    b = load_file(str(res.drafter_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_runtime_eagle3_lossless(eagle_run, tiny_target):
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    target = LlamaModel.from_pretrained(tiny_target)
    drafter = Eagle3Drafter(eagle_run[1].drafter_dir, target)
    for prompt in _prompts(4):
        for d in (1, 3, 5):
            out, _ = speculative_generate(target, drafter, prompt, 30, d, eos_ids=(2,))
            assert out == generate(target, prompt, 30, (2,))


def test_first_layer_alignment_is_what_runtime_computes(tiny_target, convs, tmp_path):
    """ModelOpt's own first EAGLE-3 layer normalises the hidden input twice; TensorRT-LLM once. With a
    non-uniform input_layernorm (as after training) only the aligned model computes what is deployed."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.export import export_drafter

    cfg = json.loads((tiny_target / "config.json").read_text())
    recipe = _recipe(tiny_target, convs)
    ids = torch.randint(7, 256, (1, 24), generator=torch.Generator().manual_seed(0))
    target = LlamaModel.from_pretrained(tiny_target)
    agree = {}
    for aligned in (True, False):
        model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
        ms.convert(model, cfg, recipe.drafter, draft_vocab_size=64)
        layer = model.eagle_module.layers[0]
        if not aligned:  # ModelOpt's stock first layer
            layer.forward = type(layer).forward.__get__(layer)
        torch.manual_seed(0)
        with torch.no_grad():
            for p in model.eagle_module.parameters():
                p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.2, 3.0)
        export_drafter(model, tmp_path / str(aligned), "fp32", {})
        seen = []
        hook = model.eagle_module.lm_head.register_forward_hook(lambda m, i, o, seen=seen: seen.append(o.detach()))
        model.train()
        model._cached_attn_blk_masks = {}
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), loss_mask=torch.ones(1, 24))
        hook.remove()
        modelopt_top1 = seen[0][0, :-1].argmax(-1)  # TTT step 0: position t predicts token t + 2
        drafter = Eagle3Drafter(tmp_path / str(aligned), target)
        _, aux, _ = target.forward(ids, torch.tensor([0]), target.new_cache(1, 32), capture=drafter.capture)
        runtime_top1 = drafter.teacher_forced(ids[0].tolist(), aux).argmax(-1)
        agree[aligned] = float((modelopt_top1 == runtime_top1).float().mean())
    assert agree[True] == 1.0
    assert agree[False] < 0.9


def test_mtp_head_train_export_doctor_runtime(tiny_target, convs, tmp_path, cli):
    """A target without native MTP layers: ModelOpt's EAGLE-MTP preset trains a head, we export it, doctor passes
    it (warning that TensorRT-LLM cannot serve it), and the reference decoder reads it losslessly."""
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.doctor import run_doctor

    res = run_train(_recipe(tiny_target, convs, type="eagle_mtp"), tmp_path / "mtp", log=lambda m: None)
    cfg = json.loads((res.drafter_dir / "config.json").read_text())
    assert cfg["eagle_config"]["use_aux_hidden_state"] is False and cfg["draft_vocab_size"] == 64
    kind, findings = run_doctor(res.drafter_dir, tiny_target, json.loads((tiny_target / "config.json").read_text()))
    levels = {f.check: f.level for f in findings}
    assert kind == "eagle_mtp" and levels["layout"] == "ok" and levels["parity"] == "ok", findings
    assert levels["deploy"] == "warning" and not [f for f in findings if f.level == "error"]
    r = cli("doctor", res.drafter_dir, "--target", tiny_target)
    assert r.exit_code == 0 and "(eagle_mtp)" in r.output and "[warn] deploy" in r.output, r.output
    target = LlamaModel.from_pretrained(tiny_target)
    kind, drafter = load_runtime_drafter(str(res.drafter_dir), target, expect="eagle_mtp")
    assert kind == "eagle_mtp" and drafter.capture == (target.cfg.num_layers - 1,)
    for prompt in _prompts(3):
        for d in (1, 3):
            out, _ = speculative_generate(target, drafter, prompt, 30, d, eos_ids=(2,))
            assert out == generate(target, prompt, 30, (2,))


def test_mtp_runtime_computes_what_modelopt_trains(tiny_target, convs, tmp_path):
    """Random (non-uniform) weights: ModelOpt's EAGLE-MTP forward and our reader of its export pick the same
    token at every position (TTT step 0: position t predicts token t + 2 from the target's final hidden)."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.export import export_drafter

    cfg = json.loads((tiny_target / "config.json").read_text())
    recipe = _recipe(tiny_target, convs, type="eagle_mtp")
    ids = torch.randint(7, 256, (1, 24), generator=torch.Generator().manual_seed(0))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    ms.convert(model, cfg, recipe.drafter, draft_vocab_size=64)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.eagle_module.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.2, 3.0)
    export_drafter(model, tmp_path / "mtp", "fp32", {})
    seen = []
    hook = model.eagle_module.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    model.train()
    model._cached_attn_blk_masks = {}
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), loss_mask=torch.ones(1, 24))
    hook.remove()
    modelopt_top1 = seen[0][0, :-1].argmax(-1)
    target = LlamaModel.from_pretrained(tiny_target)
    drafter = Eagle3Drafter(tmp_path / "mtp", target)
    _, aux, _ = target.forward(ids, torch.tensor([0]), target.new_cache(1, 32), capture=drafter.capture)
    runtime_top1 = drafter.teacher_forced(ids[0].tolist(), aux).argmax(-1)
    assert float((modelopt_top1 == runtime_top1).float().mean()) == 1.0


def test_dflash_train_export_runtime(tiny_target, convs, tmp_path):
    from tests.unit.test_runtime import _prompts
    from trtllm_spec.drafters.dflash.runtime import DFlashDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.doctor import run_doctor

    recipe = _recipe(tiny_target, convs, type="dflash", num_layers=2, block_size=4, mask_token=3,
                     draft_vocab_size=None)
    res = run_train(recipe, tmp_path / "dflash", log=lambda m: None)
    cfg = json.loads((res.drafter_dir / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == 4
    kind, findings = run_doctor(res.drafter_dir, tiny_target, json.loads((tiny_target / "config.json").read_text()))
    assert kind == "dflash" and not [f for f in findings if f.level == "error"], findings
    target = LlamaModel.from_pretrained(tiny_target)
    drafter = DFlashDrafter(res.drafter_dir, target)
    for prompt in _prompts(3):
        for d in (1, 3):
            out, _ = speculative_generate(target, drafter, prompt, 30, d, eos_ids=(2,))
            assert out == generate(target, prompt, 30, (2,))


@pytest.mark.parametrize("mode", ["none", "lm_head", "last_layer"])
def test_init_from_target_modes(tiny_target, mode):
    """lm_head: the draft lm_head rows are the target's rows of the draft vocabulary (via d2t) and the norm is
    the target's; last_layer: the drafter layer's hidden half of q/k/v and its MLP are the target's last layer."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.train import modelopt_setup as ms

    cfg = json.loads((tiny_target / "config.json").read_text())
    recipe = _recipe(tiny_target, Path("unused.jsonl"))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    last = ms.last_layer_state(model)
    target_head = model.lm_head.weight.detach().clone()
    ms.convert(model, cfg, recipe.drafter, draft_vocab_size=64)
    ids = torch.arange(64) * 3 + 5  # a draft vocabulary that is not the first 64 ids
    d2t = ids - torch.arange(64)
    ms.load_d2t(model, d2t)
    if mode != "none":
        ms.init_eagle3_from_target(model, d2t, last, layer=mode == "last_layer")
    em = model.eagle_module
    h = cfg["hidden_size"]
    head_is_target = torch.equal(em.lm_head.weight, target_head[ids])
    layer_is_target = torch.equal(em.layers[0].mlp.down_proj.weight, last["mlp.down_proj.weight"]) and torch.equal(
        em.layers[0].self_attn.q_proj.weight[:, h:], last["self_attn.q_proj.weight"])
    assert head_is_target == (mode != "none")
    assert torch.equal(em.norm.weight, last["final_norm.weight"]) or mode == "none"
    assert layer_is_target == (mode == "last_layer")


def test_loss_on_all_trains_every_position(tiny_target, convs):
    from transformers import AutoTokenizer

    from trtllm_spec.data.regenerate import read_done
    from trtllm_spec.train.run import prepare_samples

    tok = AutoTokenizer.from_pretrained(str(tiny_target))
    rows = list(read_done(convs).values())
    asst, held_a, counts_a, _ = prepare_samples(tok, rows, 64, 0.25, 0, loss_on="assistant")
    every, held_e, counts_e, _ = prepare_samples(tok, rows, 64, 0.25, 0, loss_on="all")
    n_a, n_e = (sum(sum(c.loss_mask) for c in x) for x in (asst, every))
    assert n_e > n_a > 0
    assert [c.loss_mask for c in held_a] == [c.loss_mask for c in held_e]  # held-out scores assistant tokens only
    assert counts_a == counts_e  # the draft vocabulary still follows what the drafter must propose
