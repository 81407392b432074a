"""``data features`` (issue 15 item 2): the target's hidden states over the regenerated conversations as their own
step: safetensors shards with an index, resumable, sharded, bf16 / fp8 / fp32, refused for another target or layer
set; and the SaveState reader, tested on fake dumps built from TensorRT-LLM's documented format."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

from trtllm_spec.errors import UserError


def recipe_file(tmp_path: Path, target: Path, **data) -> Path:
    d = {"num_conversations": 6, "regen_max_new_tokens": 6, "regen_batch_size": 4, **data}
    p = tmp_path / "r.yaml"
    p.write_text(json.dumps({"name": "feat", "target": {"model": str(target)}, "drafter": {
        "type": "eagle3", "layers_to_capture": [0, 2], "draft_vocab_size": 64,
        "training": {"max_steps": 2, "batch_size": 2, "seq_len": 32, "precision": "fp32", "data": d}}}))
    return p


@pytest.fixture
def regenerated(cli, tiny_target, tiny_suite, tmp_path):
    r = recipe_file(tmp_path, tiny_target)
    conv = tmp_path / "d" / "conversations.jsonl"
    # online for regeneration alone: our decoder would otherwise keep the features while decoding
    res = cli("data", "regenerate", r, "--out", conv, "--dtype", "fp32", "--set",
              "drafter.training.data.offline_features=false")
    assert res.exit_code == 0, res.output
    return r, conv


def _index(folder: Path, name: str = "index.json") -> dict:
    return json.loads((folder / name).read_text())


def test_fp8_round_trip_error_is_bounded():
    from trtllm_spec.data.features import decode, encode

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3 * 32, generator=g) * torch.tensor([1.0, 30.0, 0.01]).repeat_interleave(32)
    x[5, 7] = 400.0  # an outlier moves its own row's scale only
    for dtype, bound in (("fp32", 0.0), ("bf16", 0.005), ("fp8", 0.04)):
        enc = encode(x, dtype, groups=3)
        y = decode(enc[""], enc.get("_scale"))
        # per captured layer: each block is scaled alone, so the small-valued layer keeps its precision too
        for blk in range(3):
            a, b = x[:, blk * 32:(blk + 1) * 32], y[:, blk * 32:(blk + 1) * 32]
            assert ((a - b).norm() / a.norm()).item() <= bound, (dtype, blk)
    enc = encode(x, "fp8", groups=3)
    assert enc[""].dtype == torch.float8_e4m3fn and enc["_scale"].shape == (64, 3)


def test_cli_features_writes_shards_an_index_and_resumes(cli, regenerated, tiny_target, tmp_path):
    from trtllm_spec.data.features import FeatureSet
    from trtllm_spec.data.regen_hf import HFEngine
    from trtllm_spec.data.regenerate import read_done

    r, conv = regenerated
    res = cli("data", "features", r, "--conversations", conv, "--features-dtype", "fp32", "--batch-size", "4")
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("budget: features of 6/6 conversations") and "fp32" in first
    folder = conv.parent / "features"
    idx = _index(folder)
    assert idx["layers"] == [0, 2] and idx["hidden_size"] == 64 and idx["dtype"] == "fp32"
    assert len(idx["conversations"]) == 6 and len(idx["shards"]) == 2  # 4 + 2 per forward
    assert idx["provenance"]["placement"]["device"] == "cpu"
    recs = read_done(conv)
    fs = FeatureSet(folder)
    eng = HFEngine(tiny_target, dtype="fp32")
    for cid, rec in list(recs.items())[:3]:
        ids, mask, aux, hidden = fs.get(cid)
        assert ids == rec["tokens"] and mask == rec["assistant"] and idx["conversations"][cid]["tokens"] == len(ids)
        ref = eng.teacher_forced([ids], (0, 2))[0]  # one sequence alone: no padding
        assert torch.allclose(aux, ref["aux"], atol=1e-4) and torch.allclose(hidden, ref["hidden"], atol=1e-4)
    res = cli("data", "features", r, "--conversations", conv, "--features-dtype", "fp32")
    assert res.exit_code == 0 and "features of 0 conversations (6 already there" in res.output


def test_sharded_writers_keep_their_own_index(cli, regenerated, monkeypatch):
    from trtllm_spec.data.features import FeatureSet, rank_part

    r, conv = regenerated
    out = conv.parent / "sharded"
    for i in range(2):
        res = cli("data", "features", r, "--conversations", conv, "--out", out, "--shard", f"{i}/2")
        assert res.exit_code == 0, res.output
    a, b = _index(out, "index-0-of-2.json"), _index(out, "index-1-of-2.json")
    assert len(a["conversations"]) == len(b["conversations"]) == 3 and not set(a["conversations"]) & set(b["conversations"])
    assert len(FeatureSet(out).entries) == 6
    assert rank_part((1, 2), {"RANK": "1", "WORLD_SIZE": "4"}) == (5, 8)
    assert rank_part(None, {"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4) and rank_part((0, 2), {}) == (0, 2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    res = cli("data", "features", r, "--conversations", conv, "--out", conv.parent / "ranked")
    assert res.exit_code == 0 and len(_index(conv.parent / "ranked", "index-1-of-2.json")["conversations"]) == 3


def test_fp8_features_are_smaller_and_close(cli, regenerated):
    from trtllm_spec.data.features import FeatureSet

    r, conv = regenerated
    for dtype in ("bf16", "fp8"):
        res = cli("data", "features", r, "--conversations", conv, "--out", conv.parent / dtype, "--features-dtype",
                  dtype)
        assert res.exit_code == 0, res.output
    size = {d: sum(p.stat().st_size for p in (conv.parent / d).glob("*.safetensors")) for d in ("bf16", "fp8")}
    assert size["fp8"] < 0.75 * size["bf16"]
    a, b = FeatureSet(conv.parent / "bf16"), FeatureSet(conv.parent / "fp8")
    for cid in list(a.entries)[:3]:
        _, _, aux_a, hid_a = a.get(cid)
        _, _, aux_b, hid_b = b.get(cid)
        assert ((aux_a - aux_b).norm() / aux_a.norm()) < 0.05 and ((hid_a - hid_b).norm() / hid_a.norm()) < 0.05


def test_features_of_another_target_or_layer_set_are_refused(cli, regenerated, tmp_path):
    r, conv = regenerated
    assert cli("data", "features", r, "--conversations", conv).exit_code == 0
    before = {p.name: p.stat().st_mtime_ns for p in (conv.parent / "features").iterdir()}
    res = cli("data", "features", r, "--conversations", conv, "--set", "drafter.layers_to_capture=[1,2]")
    assert res.exit_code == 2 and "captured layers [0, 2]" in res.output and "[1, 2]" in res.output
    res = cli("data", "features", r, "--conversations", conv, "--features-dtype", "fp8")
    assert res.exit_code == 2 and "dtype 'bf16'" in res.output
    idx = _index(conv.parent / "features")
    idx["target_config_sha256"] = "0" * 64
    (conv.parent / "features" / "index.json").write_text(json.dumps(idx))
    res = cli("data", "features", r, "--conversations", conv)
    assert res.exit_code == 2 and "config.json sha256" in res.output and len(res.output.strip().splitlines()) <= 3
    after = {p.name: p.stat().st_mtime_ns for p in (conv.parent / "features").iterdir()}
    assert set(after) == set(before)


def test_disk_full_mid_write_keeps_the_index_and_a_rerun_resumes(cli, regenerated, monkeypatch):
    import safetensors.torch as st

    r, conv = regenerated
    real, calls = st.save_file, []

    def full_on_second(tensors, path, *a, **k):
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"half a shard")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(tensors, path, *a, **k)

    monkeypatch.setattr(st, "save_file", full_on_second)
    res = cli("data", "features", r, "--conversations", conv, "--batch-size", "3")
    assert res.exit_code == 2 and "No space left on device" in res.output and "it resumes" in res.output
    folder = conv.parent / "features"
    assert len(_index(folder)["conversations"]) == 3 and not list(folder.glob("*.partial"))
    (folder / "f-000001.partial").write_bytes(b"a killed run's shard")
    monkeypatch.setattr(st, "save_file", real)
    res = cli("data", "features", r, "--conversations", conv, "--batch-size", "3")
    assert res.exit_code == 0 and "features of 3 conversations (3 already there" in res.output
    assert len(_index(folder)["conversations"]) == 6 and not list(folder.glob("*.partial"))


def test_budget_refuses_features_the_disk_cannot_hold(cli, regenerated, monkeypatch):
    import trtllm_spec.data.budget as budget

    r, conv = regenerated
    monkeypatch.setattr(budget, "free_disk", lambda p: 1000.0)
    res = cli("data", "features", r, "--conversations", conv)
    assert res.exit_code == 2 and "the features need up to" in res.output and "fp8" in res.output
    assert not (conv.parent / "features").exists()


@pytest.mark.parametrize("args,msg", [
    (["--shard", "3/2"], "0 <= I < N"),
    (["--device-map", "auto"], "--device-map auto spreads the target over GPUs"),
    (["--features-dtype", "fp4"], "Invalid value for '--features-dtype'"),
    (["--batch-size", "0"], "Invalid value for '--batch-size'"),
    (["--conversations", "missing.jsonl"], "conversations file missing.jsonl does not exist"),
    (["--set", "drafter.training.data.offline_features=false"], "trains without captured target features"),
    (["--set", "drafter.layers_to_capture=[0,9]"], "layer 9 is outside the target's 8 layers"),
])
def test_bad_features_input_exits_2_and_writes_nothing(cli, regenerated, args, msg):
    r, conv = regenerated
    if "--conversations" not in args:
        args = ["--conversations", str(conv), *args]
    res = cli("data", "features", r, "--out", conv.parent / "bad", *args)
    assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output
    assert not (conv.parent / "bad").exists()


# ---- SaveState -----------------------------------------------------------------------------------------------

def write_fake_savestate(folder: Path, seqs: list[list[int]], target: Path, layers: tuple[int, ...],
                         with_final_in_aux: bool, per_file: int = 2) -> None:
    """A FAKE TensorRT-LLM SaveState dump built from the documented format (trtllm_spec/data/savestate.py):
    ``{prefix}_{iter}.pt`` files, each a torch.save'd list of {id, input_ids, hidden_state, aux_hidden_states};
    the engine appends its one generated token to input_ids. Features come from transformers (fp32)."""
    from trtllm_spec.data.regen_hf import HFEngine

    eng = HFEngine(target, dtype="fp32")
    folder.mkdir(parents=True)
    recs = []
    for n, ids in enumerate(seqs, start=1):
        fe = eng.teacher_forced([ids + [5]], layers)[0]
        aux = torch.cat([fe["aux"], fe["hidden"]], -1) if with_final_in_aux else fe["aux"]
        recs.append({"id": n, "input_ids": torch.tensor(ids + [5]), "hidden_state": fe["hidden"].bfloat16(),
                     "aux_hidden_states": aux.bfloat16()})
        if n % per_file == 0 or n == len(seqs):
            torch.save(recs, folder / f"dp_0_{n}.pt")
            recs = []


@pytest.mark.parametrize("with_final", [False, True])
def test_savestate_reader_on_fake_dumps(tiny_target, tmp_path, with_final):
    from trtllm_spec.data.savestate import SaveStateSet

    seqs = {"a": ([1, 7, 8, 9], [0, 0, 1, 1]), "b": ([1, 10, 11], [0, 1, 1]), "c": ([1, 12], [0, 1])}
    write_fake_savestate(tmp_path / "ss", [v[0] for v in seqs.values()], tiny_target, (0, 2), with_final)
    assert sorted(p.name for p in (tmp_path / "ss").iterdir()) == ["dp_0_2.pt", "dp_0_3.pt"]
    s = SaveStateSet(tmp_path / "ss", seqs, (0, 2), 64)
    ids, mask, aux, hidden = s.get("b")
    assert ids == [1, 10, 11] and mask == [0, 1, 1] and aux.shape == (3, 128) and hidden.shape == (3, 64)
    with pytest.raises(UserError, match=f"has {192 if with_final else 128} columns, 4 captured layers x 64 = 256"):
        SaveStateSet(tmp_path / "ss", seqs, (0, 1, 2, 3), 64)
    with pytest.raises(UserError, match="no SaveState record holds the tokens of conversation 'z'"):
        SaveStateSet(tmp_path / "ss", {**seqs, "z": ([1, 99], [0, 1])}, (0, 2), 64).get("z")
    (tmp_path / "ss" / "dp_0_9.pt").write_bytes(b"not a torch file")
    with pytest.raises(UserError, match=r"dp_0_9.pt: not a SaveState file torch.load\(weights_only=True\)"):
        SaveStateSet(tmp_path / "ss", seqs, (0, 2), 64)


def test_training_reads_a_fake_savestate_dump(tiny_target, tiny_suite, tmp_path):
    """Offline training from a (fake) TensorRT-LLM SaveState dump given as data.features_path: no features step."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.data.features import sequences
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.run import conversations

    r = recipe_file(tmp_path, tiny_target)
    convs = conversations(load_recipe(r), tiny_target, tmp_path / "d", lambda m: None)
    seqs = sequences(convs, load_tokenizer(tiny_target))
    write_fake_savestate(tmp_path / "ss", [v[0] for v in seqs.values()], tiny_target, (0, 2), False)
    recipe = load_recipe(r, (f"drafter.training.data.path={tmp_path / 'd/conversations.jsonl'}",
                             f"drafter.training.data.features_path={tmp_path / 'ss'}"))
    logs: list[str] = []
    res = run_train(recipe, tmp_path / "t", log=logs.append)
    assert res.summary["offline_features"] is True and res.summary["train_acc"]
    assert any(f"target hidden states from {tmp_path / 'ss'}" in m for m in logs)
    assert not (tmp_path / "t/data/features").exists()
