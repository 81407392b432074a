"""Third-party EAGLE-3 drafters (SafeAILab/EAGLE, vLLM speculators) -> our layout, and back.

Fixtures write each layout by hand from the upstream sources (not with the module under test), so the key
maps are checked against an independent spelling of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
from safetensors.torch import load_file, save_file  # noqa: E402

from tests.convert_inverse import export_to_layout  # noqa: E402
from trtllm_spec.drafters.eagle3.convert import convert_drafter, detect_layout  # noqa: E402
from trtllm_spec.errors import OutputExistsError, UserError  # noqa: E402

H, NH, NKV, HD, INTER, V, DV, L = 64, 4, 2, 16, 128, 256, 64, 8
TARGET = {"_name_or_path": "tiny/target", "architectures": ["LlamaForCausalLM"], "hidden_size": H,
          "vocab_size": V, "num_hidden_layers": L, "max_position_embeddings": 4096}
NORMS = ["hidden_norm", "input_layernorm", "post_attention_layernorm"]
SHAPES = {"self_attn.q_proj": (NH * HD, 2 * H), "self_attn.k_proj": (NKV * HD, 2 * H),
          "self_attn.v_proj": (NKV * HD, 2 * H), "self_attn.o_proj": (H, NH * HD),
          "mlp.gate_proj": (INTER, H), "mlp.up_proj": (INTER, H), "mlp.down_proj": (H, INTER),
          **{n: (H,) for n in NORMS}}


def ours_tensors(seed: int = 0, dtype=torch.bfloat16) -> dict:
    """One drafter in our key names: layers.0.*, fc, norm, lm_head [DV, H], d2t."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return (torch.randn(shape, generator=g) * 0.1).to(dtype)

    t = {f"layers.0.{n}.weight": rand(*shape) for n, shape in SHAPES.items()}
    t.update({"fc.weight": rand(H, 3 * H), "norm.weight": rand(H), "lm_head.weight": rand(DV, H)})
    chosen = torch.randperm(V, generator=g)[:DV].sort().values
    t["d2t"] = chosen - torch.arange(DV)
    return t


def dims(**extra) -> dict:
    return {"hidden_size": H, "intermediate_size": INTER, "num_attention_heads": NH,
            "num_key_value_heads": NKV, "head_dim": HD, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "vocab_size": V, "max_position_embeddings": 2048, **extra}


def mask(d2t):
    m = torch.zeros(V, dtype=torch.bool)
    m[torch.arange(DV) + d2t] = True
    return m


def write_ours(folder: Path, t: dict, ids=(1, 3, 4)) -> Path:
    """What ModelOpt's export_speculative_decoding writes (nvidia-modelopt 0.47.0, ``modelopt/torch/export/plugins/hf_spec_export.py``)."""
    folder.mkdir(parents=True)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **dims(), "rope_scaling": None,
           "draft_vocab_size": DV, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True,
                            "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                            "use_mtp_layernorm": False, "next_layer_regular": True}}
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(t, str(folder / "model.safetensors"))
    return folder


def write_eagle(folder: Path, t: dict, pickle: bool = False, embed: bool = True, **cfg_extra) -> Path:
    """SafeAILab eagle/model/cnets.py ``Model`` state dict + a flat config (eagle/traineagle3/config.json)."""
    folder.mkdir(parents=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", **dims(),
           "torch_dtype": "float16", "tie_word_embeddings": False, "draft_vocab_size": DV, "pad_token_id": 0,
           **cfg_extra}
    sd = {k.replace("layers.0.", "midlayer."): v for k, v in t.items()}
    sd["t2d"] = mask(t["d2t"])
    if embed:
        sd["embed_tokens.weight"] = torch.zeros(V, H, dtype=t["fc.weight"].dtype)
    (folder / "config.json").write_text(json.dumps(cfg))
    if pickle:
        torch.save(sd, folder / "pytorch_model.bin")
    else:
        save_file(sd, str(folder / "model.safetensors"))
    return folder


def write_speculators(folder: Path, t: dict, ids=(2, 4, 5), inner=None, **flags) -> Path:
    """speculators Eagle3SpeculatorConfig + Eagle3DraftModel state dict (src/speculators/models/eagle3)."""
    folder.mkdir(parents=True)
    inner = inner or {"model_type": "llama", **dims(), "torch_dtype": "bfloat16", "rope_scaling": None,
                      "attention_bias": False, "mlp_bias": False}
    verifier = {"name_or_path": "tiny/target", "architectures": ["LlamaForCausalLM"]}
    cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
           "speculators_version": "0.9.0", "transformer_layer_config": inner, "draft_vocab_size": DV,
           "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
           "embed_requires_grad": False, "target_hidden_size": None,
           "eagle_aux_hidden_state_layer_ids": list(ids) if ids else None,
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": verifier},
           **flags}
    sd = {**t, "t2d": mask(t["d2t"]), "embed_tokens.weight": torch.zeros(V, H, dtype=t["fc.weight"].dtype)}
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(sd, str(folder / "model.safetensors"))
    return folder


def read(folder: Path) -> tuple[dict, dict]:
    return json.loads((folder / "config.json").read_text()), load_file(str(folder / "model.safetensors"))


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def _edit(folder: Path, drop=(), **changes) -> None:
    sd = load_file(str(folder / "model.safetensors"))
    sd.update(changes)
    for k in drop:
        del sd[k]
    save_file(sd, str(folder / "model.safetensors"))


# ---- foreign -> ours ---------------------------------------------------------------------------------------
def test_eagle_to_ours_maps_every_tensor_exactly(tmp_path):
    t = ours_tensors()
    src = write_eagle(tmp_path / "eagle", t)
    s = convert_drafter(src, tmp_path / "out", "eagle", TARGET)
    cfg, got = read(tmp_path / "out")
    assert_same(got, t)
    assert s["layout"] == "eagle" and s["dtype"] == "bfloat16" and s["draft_vocab_size"] == DV
    assert s["tensors_mapped"]["midlayer.hidden_norm.weight"] == "layers.0.hidden_norm.weight"
    assert set(s["dropped"]) == {"t2d", "embed_tokens.weight"}
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["torch_dtype"] == "bfloat16"  # the stored dtype, not the config's float16
    assert any("float16" in n for n in s["notes"])
    assert cfg["draft_vocab_size"] == DV and cfg["rope_scaling"] is None
    assert cfg["tie_word_embeddings"] is False
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # default {1, L/2-1, L-4}
    assert cfg["max_position_embeddings"] == 4096  # raised to the target's
    assert not list(tmp_path.glob(".out.*"))  # temp folder renamed away


def test_eagle_without_target_keeps_rope_scaling_and_leaves_ids_to_trtllm(tmp_path):
    scaling = {"type": "linear", "factor": 2.0}
    src = write_eagle(tmp_path / "eagle", ours_tensors(), rope_scaling=scaling)
    s = convert_drafter(src, tmp_path / "out")
    cfg, _ = read(tmp_path / "out")
    assert cfg["rope_scaling"] == scaling and "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    assert any("no capture layer ids" in n for n in s["notes"])


def test_speculators_to_ours_shifts_layer_ids(tmp_path):
    t = ours_tensors(1)
    src = write_speculators(tmp_path / "spec", t, ids=(2, 5, 4))
    s = convert_drafter(src, tmp_path / "out")
    cfg, got = read(tmp_path / "out")
    assert_same(got, t)
    assert s["layout"] == "speculators" and s["aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert cfg["hidden_size"] == H and cfg["head_dim"] == HD and cfg["vocab_size"] == V
    assert "embed_tokens.weight" in s["dropped"]


def test_speculators_transformers5_spelling(tmp_path):
    """speculators 0.9 + transformers 5 save ``dtype`` and ``rope_parameters`` in transformer_layer_config."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    inner = {"model_type": "llama", **{k: v for k, v in dims().items() if k != "rope_theta"},
             "dtype": "bfloat16", "rope_parameters": rope}
    src = write_speculators(tmp_path / "spec", ours_tensors(), ids=None, inner=inner)
    convert_drafter(src, tmp_path / "out", target_config=TARGET)
    cfg, _ = read(tmp_path / "out")
    assert cfg["rope_theta"] == 500000.0
    assert cfg["rope_scaling"] == {k: v for k, v in rope.items() if k != "rope_theta"}
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # default from the target


def test_t2d_only_gives_d2t_offsets(tmp_path):
    t = ours_tensors()
    src = write_eagle(tmp_path / "eagle", t)
    _edit(src, drop=["d2t"])
    s = convert_drafter(src, tmp_path / "out")
    assert torch.equal(read(tmp_path / "out")[1]["d2t"], t["d2t"])
    assert s["tensors_mapped"]["t2d"].startswith("d2t")


def test_full_vocab_drafter_has_no_d2t(tmp_path):
    t = {**ours_tensors(), "lm_head.weight": torch.zeros(V, H, dtype=torch.bfloat16)}
    src = write_speculators(tmp_path / "spec", t)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "draft_vocab_size": V}))
    _edit(src, drop=["d2t", "t2d"])
    convert_drafter(src, tmp_path / "out")
    cfg, got = read(tmp_path / "out")
    assert "d2t" not in got and cfg["draft_vocab_size"] == V == cfg["vocab_size"]


def test_sharded_safetensors(tmp_path):
    t = ours_tensors()
    src = write_speculators(tmp_path / "spec", t)
    sd = load_file(str(src / "model.safetensors"))
    (src / "model.safetensors").unlink()
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[:5], "model-00002-of-00002.safetensors": names[5:]}
    for f, keys in shards.items():
        save_file({k: sd[k] for k in keys}, str(src / f))
    wmap = {k: f for f, keys in shards.items() for k in keys}
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    convert_drafter(src, tmp_path / "out")
    assert_same(read(tmp_path / "out")[1], t)


def test_pickle_only_checkpoint_is_read_with_weights_only(tmp_path, monkeypatch):
    t = ours_tensors()
    src = write_eagle(tmp_path / "eagle", t, pickle=True)
    seen = {}
    real = torch.load

    def spy(*a, **kw):
        seen.update(kw)
        return real(*a, **kw)

    monkeypatch.setattr(torch, "load", spy)
    s = convert_drafter(src, tmp_path / "out", "auto", TARGET)
    assert seen.get("weights_only") is True
    assert "weights_only=True" in s["loaded_with"]
    assert_same(read(tmp_path / "out")[1], t)


class _Payload:
    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(_Payload.marker),))


def test_pickle_with_code_is_refused(tmp_path):
    src = write_eagle(tmp_path / "eagle", ours_tensors(), pickle=True)
    _Payload.marker = str(tmp_path / "pwned")
    torch.save({"fc.weight": _Payload()}, src / "pytorch_model.bin")
    with pytest.raises(UserError, match="weights_only"):
        convert_drafter(src, tmp_path / "out")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "out").exists()


# ---- detection, round trips, the reference runtime --------------------------------------------------------
def test_detect_layout(tmp_path):
    t = ours_tensors()
    assert detect_layout(write_ours(tmp_path / "o", t)) == "ours"
    assert detect_layout(write_eagle(tmp_path / "e", t)) == "eagle"
    assert detect_layout(write_eagle(tmp_path / "b", t, pickle=True)) == "eagle"
    assert detect_layout(write_speculators(tmp_path / "s", t)) == "speculators"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": H}))
    with pytest.raises(UserError, match="cannot tell the layout"):
        detect_layout(tmp_path / "x")


@pytest.mark.parametrize("fmt", ["eagle", "speculators"])
def test_round_trip_is_identical(tmp_path, fmt):
    t = ours_tensors(2)
    ours = write_ours(tmp_path / "ours", t)
    s = export_to_layout(ours, tmp_path / fmt, fmt, TARGET)
    assert detect_layout(tmp_path / fmt) == fmt and "t2d" in s["tensors"]
    convert_drafter(tmp_path / fmt, tmp_path / "back", fmt, TARGET)
    (cfg0, t0), (cfg1, t1) = read(ours), read(tmp_path / "back")
    assert_same(t1, t0)
    cfg0["max_position_embeddings"] = 4096  # the only change: raised to the target's
    assert cfg1 == cfg0


def test_export_refuses_what_the_layout_cannot_hold(tmp_path):
    ours = write_ours(tmp_path / "ours", ours_tensors(), ids=(0, 3, 6))
    with pytest.raises(UserError, match="hard-codes"):
        export_to_layout(ours, tmp_path / "e", "eagle", TARGET)
    bias = torch.zeros(H, dtype=torch.bfloat16)
    extra = write_ours(tmp_path / "extra", {**ours_tensors(), "fc.bias": bias})
    with pytest.raises(UserError, match="fc.bias"):
        export_to_layout(extra, tmp_path / "s", "speculators")


def test_converted_drafter_runs_like_the_source(tmp_path):
    """Doctor-style check: our reference runtime (TensorRT-LLM semantics) loads the converted folder and
    drafts exactly what it drafts from the SafeAILab folder, which it also reads natively."""
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaConfig, LlamaModel

    g = torch.Generator().manual_seed(7)
    w = {"model.embed_tokens.weight": torch.randn(V, H, generator=g), "model.norm.weight": torch.ones(H),
         "lm_head.weight": torch.randn(V, H, generator=g) * 0.1}
    for i in range(L):
        p = f"model.layers.{i}."
        for n, shape in SHAPES.items():
            if n not in NORMS:
                shape = (shape[0], H) if n[-6:] in ("q_proj", "k_proj", "v_proj") else shape  # not 2H
                w[p + n + ".weight"] = torch.randn(shape, generator=g) * 0.1
        w[p + "input_layernorm.weight"] = w[p + "post_attention_layernorm.weight"] = torch.ones(H)
    cfg = LlamaConfig(num_layers=L, hidden_size=H, num_heads=NH, num_kv_heads=NKV, head_dim=HD,
                      intermediate_size=INTER, vocab_size=V, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tied_embeddings=False)
    target = LlamaModel(cfg, w)
    src = write_eagle(tmp_path / "eagle", ours_tensors(3, torch.float32))
    convert_drafter(src, tmp_path / "ours", "eagle", TARGET)
    prompt = [5, 17, 42, 99, 3, 250]
    drafts = []
    for folder in (src, tmp_path / "ours"):
        d = Eagle3Drafter(folder, target, max_len=64)
        logits, aux, _ = target.forward(torch.tensor([prompt]), torch.tensor([0]), target.new_cache(1, 64),
                                        capture=d.capture, logits="last")
        d.reset(prompt, int(logits[0, -1].argmax()), aux)
        drafts.append(d.propose(4)[0])
        assert d.capture == (1, 3, 4)
    assert drafts[0] == drafts[1] and len(drafts[0]) == 4 and all(0 <= x < V for x in drafts[0])


# ---- bad input -------------------------------------------------------------------------------------------
def test_missing_config(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    (src / "config.json").unlink()
    with pytest.raises(UserError, match="config.json does not exist"):
        convert_drafter(src, tmp_path / "out")


def test_missing_weights(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    (src / "model.safetensors").unlink()
    with pytest.raises(UserError, match="neither model.safetensors nor pytorch_model.bin"):
        convert_drafter(src, tmp_path / "out")


def test_corrupt_safetensors(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    (src / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match="not a readable safetensors"):
        convert_drafter(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_t2d_and_d2t_disagree(tmp_path):
    t = ours_tensors()
    src = write_eagle(tmp_path / "e", t)
    bad = mask(t["d2t"])
    bad[int(bad.nonzero()[0])] = False
    bad[int((~bad).nonzero()[-1])] = True  # same count, one token swapped
    _edit(src, t2d=bad)
    with pytest.raises(UserError, match="disagree"):
        convert_drafter(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, match", [(lambda d: d + 1000, "outside the target vocabulary"),
                                           (lambda d: -torch.arange(DV), "already taken")])
def test_bad_d2t(tmp_path, change, match):
    t = ours_tensors()
    src = write_eagle(tmp_path / "e", t)
    _edit(src, drop=["t2d"], d2t=change(t["d2t"]))
    with pytest.raises(UserError, match=match):
        convert_drafter(src, tmp_path / "out")


def test_wrong_fc_width(tmp_path):
    src = write_speculators(tmp_path / "s", ours_tensors())
    _edit(src, **{"fc.weight": torch.zeros(H, 2 * H, dtype=torch.bfloat16)})
    with pytest.raises(UserError, match=r"fc.weight has shape \[64, 128\]; expected \[64, 192\]"):
        convert_drafter(src, tmp_path / "out")


def test_shape_mismatch_names_the_tensor(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    _edit(src, **{"midlayer.self_attn.k_proj.weight": torch.zeros(NH * HD, 2 * H, dtype=torch.bfloat16)})
    with pytest.raises(UserError, match="k_proj.weight has shape"):
        convert_drafter(src, tmp_path / "out")


def test_unknown_tensor_is_refused(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    _edit(src, **{"fc.bias": torch.zeros(H, dtype=torch.bfloat16)})
    with pytest.raises(UserError, match="fc.bias"):
        convert_drafter(src, tmp_path / "out")


def test_output_exists_without_force(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        convert_drafter(src, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").exists()
    with pytest.raises(OutputExistsError, match="not a trtllm-spec output"):  # --force replaces only our outputs
        convert_drafter(src, tmp_path / "out", force=True)
    assert (tmp_path / "out" / "keep.txt").exists()
    (tmp_path / "out" / "keep.txt").unlink()
    convert_drafter(src, tmp_path / "out")
    convert_drafter(src, tmp_path / "out", force=True)  # a converted drafter (its provenance.json) is ours
    assert (tmp_path / "out" / "model.safetensors").exists() and (tmp_path / "out" / "provenance.json").exists()


def test_format_mismatch_and_ours_input(tmp_path):
    t = ours_tensors()
    with pytest.raises(UserError, match="looks like the eagle layout"):
        convert_drafter(write_eagle(tmp_path / "e", t), tmp_path / "out", "speculators")
    with pytest.raises(UserError, match="already in our layout"):
        convert_drafter(write_ours(tmp_path / "o", t), tmp_path / "out")


@pytest.mark.parametrize("flag", ["norm_before_residual", "fc_norm", "embed_requires_grad"])
def test_speculators_options_we_cannot_hold(tmp_path, flag):
    src = write_speculators(tmp_path / "s", ours_tensors(), **{flag: True})
    with pytest.raises(UserError, match=flag):
        convert_drafter(src, tmp_path / "out")


def test_speculators_layer_id_zero_is_refused(tmp_path):
    src = write_speculators(tmp_path / "s", ours_tensors(), ids=(0, 4, 5))
    with pytest.raises(UserError, match=">= 1"):
        convert_drafter(src, tmp_path / "out")


def test_wrong_target(tmp_path):
    src = write_eagle(tmp_path / "e", ours_tensors())
    with pytest.raises(UserError, match="another target"):
        convert_drafter(src, tmp_path / "out", target_config={**TARGET, "hidden_size": 2 * H})
    with pytest.raises(UserError, match="outside the target's 4 layers"):
        convert_drafter(write_speculators(tmp_path / "s", ours_tensors()), tmp_path / "out2",
                        target_config={**TARGET, "num_hidden_layers": 4})


def test_mixed_dtypes_need_an_explicit_dtype(tmp_path):
    t = ours_tensors()
    t["norm.weight"] = t["norm.weight"].float()
    src = write_eagle(tmp_path / "e", t)
    with pytest.raises(UserError, match="pass dtype="):
        convert_drafter(src, tmp_path / "out")
    s = convert_drafter(src, tmp_path / "out", dtype="bfloat16")
    cfg, got = read(tmp_path / "out")
    assert s["dtype"] == cfg["torch_dtype"] == "bfloat16" and got["norm.weight"].dtype == torch.bfloat16


# ---- drafter.convert_from: the drafter stage converts (train and build) -------------------------------------------
def _convert_recipe(tmp_path: Path, src: Path, fmt: str, **extra) -> Path:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**TARGET, **dims(num_hidden_layers=L), "model_type": "llama",
                                                    "num_attention_heads": NH}))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({"name": "conv", "target": {"model": str(target)}, "hardware": {"gpu": "h100"},
                                  "workload": {"batch_sizes": [1]},
                                  "drafter": {"type": "eagle3", "convert_from": {"format": fmt, "path": str(src)},
                                              **extra}}))
    return recipe


@pytest.mark.parametrize("fmt,writer", [("eagle", write_eagle), ("speculators", write_speculators)])
def test_train_converts_convert_from(tmp_path, cli, fmt, writer):
    t = ours_tensors()
    recipe = _convert_recipe(tmp_path, writer(tmp_path / fmt, t), fmt)
    r = cli("train", recipe, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert f"converted drafter: {tmp_path / 'out' / 'drafter'}" in r.output
    cfg, got = read(tmp_path / "out" / "drafter")
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert_same(got, {k: v for k, v in t.items() if k in got})
    assert detect_layout(tmp_path / "out" / "drafter") == "ours"


def test_build_bundles_the_converted_drafter(tmp_path, cli):
    t = ours_tensors()
    recipe = _convert_recipe(tmp_path, write_eagle(tmp_path / "eagle", t), "eagle")
    r = cli("build", recipe, "--out", tmp_path / "bundle", "--cache", tmp_path / "cache")
    assert r.exit_code == 0, r.output
    _, got = read(tmp_path / "bundle" / "drafter")
    assert torch.equal(got["fc.weight"], t["fc.weight"])
    # the bundle ships the layer as midlayer.*, the name every TensorRT-LLM release loads (issue 22 item 3)
    assert not any(k.startswith("layers.0.") for k in got)
    for k, v in t.items():
        if k.startswith("layers.0."):
            assert torch.equal(got["midlayer." + k[len("layers.0."):]], v)
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["drafter"]["kind"] == "converted"
    assert "speculative_model: drafter" in (tmp_path / "bundle" / "llm_api_options.yaml").read_text()  # auto: 1.3


def test_convert_from_bad_inputs(tmp_path, cli):
    recipe = _convert_recipe(tmp_path, tmp_path / "missing", "eagle")
    r = cli("train", recipe, "--out", tmp_path / "out")
    assert r.exit_code == 2 and "drafter.convert_from.path" in r.output and "not a folder" in r.output
    (tmp_path / "b").mkdir()
    both = _convert_recipe(tmp_path / "b", tmp_path / "missing", "eagle", checkpoint="x")
    r = cli("recipe", "validate", both)
    assert r.exit_code == 2 and "keep one" in r.output
