"""The bad-input matrix: every command, driven through CliRunner with a bad recipe, checkpoint, path or
acceptance file. Each case asserts the exit code, one error line naming the field or file (and the fix), no
traceback, and that nothing was left half-written in the working folder (tests/reliability/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.reliability.conftest import assert_clean_failure, snapshot

PRESET = "llama-3.1-8b-instruct"
BASE = {"name": "bad", "target": {"model": PRESET}, "drafter": {"type": "eagle3"}, "hardware": {"gpu": "h100"}}


@dataclass
class Ctx:
    w: Path  # the watched working folder (cwd of the command); inputs are written here before the snapshot
    target: Path  # the session's tiny checkpoint (read-only: copy before changing it)
    draft: Path

    def recipe(self, data: dict | None = None, text: str | None = None, name: str = "r.yaml", **over) -> Path:
        p = self.w / name
        if text is None:
            text = yaml.safe_dump(_merge(data if data is not None else BASE, over), sort_keys=False)
        p.write_text(text)
        return p

    def json(self, name: str, data) -> Path:
        p = self.w / name
        p.write_text(json.dumps(data))
        return p

    def ckpt(self, name: str = "ckpt", src: Path | None = None) -> Path:
        dst = self.w / name
        shutil.copytree(src or self.target, dst)
        return dst

    def tiny_recipe(self, drafter: dict | None = None, target: Path | None = None, **extra) -> Path:
        data = {"name": "tiny", "target": {"model": str(target or self.target)},
                "drafter": drafter or {"type": "ngram"}, "hardware": {"gpu": "l40s"},
                "workload": {"batch_sizes": [1], "isl": 64, "osl": 32}, "planner": {"max_draft_len": 4},
                "measure": {"num_prompts": 1, "max_new_tokens": 8, "categories": ["coding"]}}
        return self.recipe(_merge(data, extra))


def _merge(base: dict, over: dict) -> dict:
    out = json.loads(json.dumps(base))
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class Case:
    id: str
    command: str
    fault: str
    args: Callable[[Ctx], list]
    names: tuple[str, ...]
    code: int = 2
    leaves: tuple[str, ...] = ()  # entries a failed command may leave by design (a build's lock file)


CASES: list[Case] = []


def case(id: str, command: str, fault: str, *names: str, code: int = 2, leaves: tuple[str, ...] = ()):
    def register(fn: Callable[[Ctx], list]) -> Callable[[Ctx], list]:
        CASES.append(Case(id, command, fault, fn, names, code, leaves))
        return fn

    return register


# ---- helpers that break things ----------------------------------------------------------------------------------

def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    for k, v in list(cfg.items()):
        if v is None:
            del cfg[k]
    (folder / "config.json").write_text(json.dumps(cfg))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _wrong_shape(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    t[name] = t[name][:, : t[name].shape[1] // 2].contiguous()
    save_file(t, str(folder / "model.safetensors"))


def _yaml_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def _nested(depth: int) -> str:
    return "target: " + "[" * depth + "1" + "]" * depth + "\n"


def _self_loop(w: Path, name: str = "loop") -> Path:
    p = w / name
    os.symlink(name, p)
    return p


# ---- recipe validate / show ---------------------------------------------------------------------------------------

@case("unknown-key", "recipe validate", "unknown nested key", "drafter.max_matching_ngram_sise",
      "did you mean 'max_matching_ngram_size'")
def _(c):
    return ["recipe", "validate", c.recipe(drafter={"type": "ngram", "max_matching_ngram_sise": 3})]


@case("unknown-section", "recipe validate", "unknown top-level key", "workloda", "did you mean 'workload'")
def _(c):
    return ["recipe", "validate", c.recipe(workloda={"isl": 3})]


@case("wrong-type-int", "recipe validate", "string for an integer", "workload.isl", "integer")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"isl": "many"})]


@case("wrong-type-list", "recipe validate", "string for a list", "workload.batch_sizes", "list")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"batch_sizes": "1,8"})]


@case("wrong-type-bool", "recipe validate", "string for a boolean", "target.trust_remote_code", "boolean")
def _(c):
    return ["recipe", "validate", c.recipe(target={"model": PRESET, "trust_remote_code": "perhaps"})]


@case("empty-file", "recipe validate", "empty recipe file", "r.yaml", "is empty")
def _(c):
    return ["recipe", "validate", c.recipe(text="")]


@case("not-yaml", "recipe validate", "unparseable YAML", "r.yaml", "not valid YAML", "at line 3")
def _(c):
    return ["recipe", "validate", c.recipe(text="name: x\ntarget: [unclosed\n")]


@case("not-mapping", "recipe validate", "YAML list instead of a mapping", "r.yaml", "must be a YAML mapping")
def _(c):
    return ["recipe", "validate", c.recipe(text="- target\n- drafter\n")]


@case("yaml-bomb", "recipe validate", "billion-laughs aliases", "r.yaml", "aliases", "expand them")
def _(c):
    return ["recipe", "validate", c.recipe(text=_yaml_bomb())]


@case("deep-nesting", "recipe validate", "40 nested lists", "r.yaml", "nested more than 32 levels")
def _(c):
    return ["recipe", "validate", c.recipe(text=_nested(40))]


@case("very-deep-nesting", "recipe validate", "20000 nested lists (parser recursion)", "r.yaml",
      "nested too deeply")
def _(c):
    return ["recipe", "validate", c.recipe(text=_nested(20000))]


@case("huge-int", "recipe validate", "10**30 as a length", "workload.isl", "less than or equal")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"isl": 10**30})]


@case("huge-float", "recipe validate", "1e400 (inf) as a count", "hardware.num_gpus", "finite")
def _(c):
    return ["recipe", "validate", c.recipe(text=yaml.safe_dump(BASE) + "hardware: {gpu: h100, num_gpus: 1.0e+400}\n")]


@case("negative-batch", "recipe validate", "negative batch size", "batch sizes must be in 1..1000000", "[-4]")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"batch_sizes": [1, -4]})]


@case("zero-layers", "recipe validate", "zero drafter layers", "drafter.num_layers", "greater than or equal to 1")
def _(c):
    return ["recipe", "validate", c.recipe(drafter={"type": "eagle3", "num_layers": 0})]


@case("zero-osl", "recipe validate", "zero output length", "workload.osl", "greater than or equal to 1")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"osl": 0})]


@case("negative-steps", "recipe validate", "negative training steps", "drafter.training.max_steps",
      "greater than or equal to 1")
def _(c):
    return ["recipe", "validate", c.recipe(drafter={"type": "eagle3", "training": {"max_steps": -1}})]


@case("draft-len-65", "recipe validate", "D above the limit", "draft_len", "1..64")
def _(c):
    return ["recipe", "validate", c.recipe(draft_len=65)]


@case("draft-len-0", "recipe validate", "D = 0", "draft_len", "1..64")
def _(c):
    return ["recipe", "validate", c.recipe(draft_len=0)]


@case("draft-len-over-max", "recipe validate", "D above planner.max_draft_len", "draft_len = 6",
      "raise planner.max_draft_len")
def _(c):
    return ["recipe", "validate", c.recipe(draft_len=6, planner={"max_draft_len": 4})]


@case("draft-len-over-block", "recipe validate", "D above a DFlash block", "block_size", "raise drafter.block_size")
def _(c):
    return ["recipe", "validate", c.recipe(draft_len=5, drafter={"type": "dflash", "block_size": 4,
                                                                 "training": {"seq_len": 64}})]


@case("unknown-drafter", "recipe validate", "unknown drafter type", "drafter.type", "'medusa'", "valid")
def _(c):
    return ["recipe", "validate", c.recipe(drafter={"type": "medusa"})]


@case("drafter-no-type", "recipe validate", "drafter without a type", "drafter", "'type' key is missing")
def _(c):
    return ["recipe", "validate", c.recipe({**BASE, "drafter": {"num_layers": 1}})]


@case("unknown-gpu", "recipe validate", "unknown GPU", "unknown GPU 'h300'", "valid:")
def _(c):
    return ["recipe", "validate", c.recipe(hardware={"gpu": "h300"})]


@case("unknown-preset", "recipe validate", "unknown target preset", "'llama-9b'", "Presets:")
def _(c):
    return ["recipe", "validate", c.recipe(target={"model": "llama-9b"})]


@case("non-utf8-recipe", "recipe validate", "Latin-1 bytes in the recipe", "r.yaml", "not UTF-8", "save it as UTF-8")
def _(c):
    p = c.w / "r.yaml"
    p.write_bytes(yaml.safe_dump(BASE).encode() + b"description: caf\xe9\n")
    return ["recipe", "validate", p]


@case("missing-recipe", "recipe validate", "non-existent path", "nope.yaml", "does not exist")
def _(c):
    return ["recipe", "validate", c.w / "nope.yaml"]


@case("recipe-is-dir", "recipe validate", "a folder for a file", "is a directory", "give a file")
def _(c):
    (c.w / "d.yaml").mkdir()
    return ["recipe", "validate", c.w / "d.yaml"]


@case("recipe-symlink-loop", "recipe validate", "recipe path is a symlink loop", "loop", "does not exist")
def _(c):
    return ["recipe", "validate", _self_loop(c.w)]


@case("extends-cycle", "recipe validate", "extends: cycle", "'extends' forms a cycle")
def _(c):
    c.recipe(text="extends: b.yaml\n", name="a.yaml")
    c.recipe(text="extends: a.yaml\n", name="b.yaml")
    return ["recipe", "validate", c.w / "a.yaml"]


@case("extends-missing", "recipe validate", "extends: a missing base", "base.yaml", "does not exist")
def _(c):
    return ["recipe", "validate", c.recipe(text="extends: base.yaml\n" + yaml.safe_dump(BASE))]


@case("set-no-equals", "recipe validate", "--set without =", "--set 'workload.isl'", "expected KEY=VALUE")
def _(c):
    return ["recipe", "validate", c.recipe(), "--set", "workload.isl"]


@case("set-into-value", "recipe validate", "--set below a scalar", "'workload.isl' is a value, not a section")
def _(c):
    return ["recipe", "validate", c.recipe(workload={"isl": 64}), "--set", "workload.isl.x=3"]


@case("huge-file", "recipe validate", "5 MiB recipe", "r.yaml", "more than the 4194304 allowed")
def _(c):
    return ["recipe", "validate", c.recipe(text="# " + "x" * (5 * 1024 * 1024) + "\n")]


@case("tp-over-gpus", "recipe validate", "tp larger than num_gpus", "hardware", "exceeds num_gpus", "raise num_gpus")
def _(c):
    return ["recipe", "validate", c.recipe(hardware={"gpu": "h100", "tp": 4})]


@case("recipe-acceptance-missing", "recipe validate", "planner.acceptance file missing", "acc.json",
      "does not exist")
def _(c):
    return ["recipe", "validate", c.recipe(planner={"acceptance": "acc.json"})]


@case("show-unknown-key", "recipe show", "unknown key", "engine.backnd", "did you mean 'backend'")
def _(c):
    return ["recipe", "show", c.recipe(engine={"backnd": "pytorch"})]


# ---- plan: acceptance files, targets, paths -------------------------------------------------------------------

def _plan(c: Ctx, *args) -> list:
    return ["plan", "--target", PRESET, "--gpu", "h100", "--batch-sizes", "1", "--no-compare", *args]


@case("acc-malformed", "plan", "acceptance file is not JSON", "acc.json", "not valid JSON", "line 1")
def _(c):
    (c.w / "acc.json").write_text('{"conditional_rates": [0.8,')
    return _plan(c, "--acceptance", c.w / "acc.json", "--json")


@case("acc-rate-above-1", "plan", "rate 1.5", "conditional_rates[1] = 1.5", "[0, 1]")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"conditional_rates": [0.9, 1.5]}), "--json")


@case("acc-rate-negative", "plan", "rate -0.1", "conditional_rates[0] = -0.1", "[0, 1]")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"conditional_rates": [-0.1]}), "--json")


@case("acc-rate-string", "plan", "rate given as text", "conditional_rates[0] = 'high'", "[0, 1]")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"conditional_rates": ["high"]}), "--json")


@case("acc-rates-empty", "plan", "empty rate list", "conditional_rates", "non-empty list")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"conditional_rates": []}), "--json")


@case("acc-al-above-1+D", "plan", "AL(2) = 3.5 > 1 + D", "acceptance_length[2] = 3.5", "[1, 3]")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"acceptance_length": {"1": 1.8, "2": 3.5}}), "--json")


@case("acc-al-below-1", "plan", "AL(1) = 0.5 < 1", "acceptance_length[1] = 0.5", "outside [1, 1 + D]")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"acceptance_length": {"1": 0.5}}), "--json")


@case("acc-al-key-0", "plan", "AL for D = 0", "acceptance_length key '0'", ">= 1")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"acceptance_length": {"0": 1.0}}), "--json")


@case("acc-al-key-text", "plan", "AL key 'two'", "acceptance_length key 'two'", "integer >= 1")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"acceptance_length": {"two": 2.0}}), "--json")


@case("acc-array", "plan", "JSON array instead of an object", "acc.json", "must hold a JSON object")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", [0.8, 0.7]), "--json")


@case("acc-no-keys", "plan", "neither rates nor AL", "acc.json", "needs 'conditional_rates'")
def _(c):
    return _plan(c, "--acceptance", c.json("acc.json", {"rates": [0.8]}), "--json")


@case("profile-unknown-category", "plan", "--category not in the profile", "no category 'poetry'", "it has: coding")
def _(c):
    prof = {"overall": {"conditional_rates": [0.8]}, "categories": {"coding": {"conditional_rates": [0.9]}}}
    return _plan(c, "--acceptance", c.json("prof.json", prof), "--category", "poetry", "--json")


@case("acc-missing", "plan", "acceptance path does not exist", "gone.json", "does not exist")
def _(c):
    return _plan(c, "--acceptance", c.w / "gone.json", "--json")


@case("target-no-config", "plan", "checkpoint folder without config.json", "has no config.json",
      "HF checkpoint folder")
def _(c):
    (c.w / "empty-ckpt").mkdir()
    return ["plan", "--target", c.w / "empty-ckpt", "--json"]


@case("target-config-corrupt", "plan", "config.json is not JSON", "config.json", "not valid JSON")
def _(c):
    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama", ')
    return ["plan", "--target", d, "--json"]


@case("target-wrong-family", "plan", "model_type bert", "model_type 'bert'", "supported families")
def _(c):
    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    return ["plan", "--target", d, "--json"]


@case("target-config-non-utf8", "plan", "config.json in Latin-1", "config.json", "not UTF-8")
def _(c):
    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_bytes(b'{"model_type": "llama", "name": "caf\xe9"}')
    return ["plan", "--target", d, "--json"]


@case("target-config-missing-field", "plan", "config.json without hidden_size", "config.json", "hidden_size")
def _(c):
    from tests.conftest import LLAMA_TINY

    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({k: v for k, v in LLAMA_TINY.items() if k != "hidden_size"}))
    return ["plan", "--target", d, "--json"]


@case("target-config-kv-heads", "plan", "num_key_value_heads = 7 for 32 heads", "config.json",
      "num_key_value_heads = 7", "num_attention_heads = 32")
def _(c):
    from tests.conftest import LLAMA_TINY

    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_TINY, "hidden_size": 256, "num_attention_heads": 32,
                                               "num_key_value_heads": 7}))
    return ["plan", "--target", d, "--json"]


@case("target-config-kv-zero", "plan", "num_key_value_heads = 0", "config.json", "num_key_value_heads = 0", ">= 1")
def _(c):
    from tests.conftest import LLAMA_TINY

    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_TINY, "num_key_value_heads": 0}))
    return ["plan", "--target", d, "--json"]


@case("target-config-negative", "plan", "num_hidden_layers = -3", "config.json", "num_hidden_layers = -3", ">= 1")
def _(c):
    from tests.conftest import LLAMA_TINY

    d = c.w / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_TINY, "num_hidden_layers": -3}))
    return ["plan", "--target", d, "--json"]


@case("gpu-file-malformed", "plan", "hardware file is not JSON", "gpu.json")
def _(c):
    (c.w / "gpu.json").write_text("{not json")
    return ["plan", "--target", PRESET, "--gpu", c.w / "gpu.json", "--json"]


@case("plan-out-is-file", "plan", "--out names a file", "out.txt", "not a folder")
def _(c):
    (c.w / "out.txt").write_text("keep me")
    return _plan(c, "--out", c.w / "out.txt")


@case("plan-out-not-empty", "plan", "--out holds files", "exists and is not empty", "--force")
def _(c):
    (c.w / "plan").mkdir()
    (c.w / "plan" / "mine.txt").write_text("keep me")
    return _plan(c, "--out", c.w / "plan")


@case("plan-out-unwritable", "plan", "--out under a regular file (unwritable)", "cannot write", "another --out")
def _(c):
    (c.w / "file").write_text("x")
    return _plan(c, "--out", c.w / "file" / "plan")


@case("plan-out-symlink-loop", "plan", "--out is a symlink loop", "loop", "another --out")
def _(c):
    return _plan(c, "--out", _self_loop(c.w))


@case("plan-batch-zero", "plan", "--batch-sizes 0", "batch sizes must be in 1..1000000")
def _(c):
    return ["plan", "--target", PRESET, "--batch-sizes", "0", "--json"]


# ---- hw --------------------------------------------------------------------------------------------------

@case("hw-unknown", "hw show", "unknown GPU", "unknown GPU 'h300'", "hw probe")
def _(c):
    return ["hw", "show", "h300"]


@case("hw-file-malformed", "hw show", "probe file is not JSON", "bad.json")
def _(c):
    (c.w / "bad.json").write_text("[1, 2")
    return ["hw", "show", c.w / "bad.json"]


@case("probe-not-json", "hw probe", "--out is not *.json", "probe.txt", "*.json")
def _(c):
    return ["hw", "probe", "--out", c.w / "probe.txt", "--quick"]


@case("probe-exists", "hw probe", "--out exists", "probe.json", "--force")
def _(c):
    (c.w / "probe.json").write_text("{}")
    return ["hw", "probe", "--out", c.w / "probe.json", "--quick"]


@case("probe-target-moe", "hw probe", "--target is an MoE model", "deepseek-v3", "MoE", "without --target")
def _(c):
    return ["hw", "probe", "--out", c.w / "probe.json", "--quick", "--target", "deepseek-v3"]


@case("probe-target-unknown", "hw probe", "--target is neither path, asset nor preset", "nope-9b", "Presets:")
def _(c):
    return ["hw", "probe", "--out", c.w / "probe.json", "--quick", "--target", "nope-9b"]


# ---- assets ------------------------------------------------------------------------------------------------

@case("assets-unknown", "assets fetch", "unknown asset name", "unknown asset 'llama'", "valid: smollm2-135m")
def _(c):
    return ["assets", "fetch", "llama", "--cache", c.w / "cache"]


@case("assets-manifest-corrupt", "assets list", "corrupt prompt manifest", "manifest.json", "delete it")
def _(c):
    (c.w / "cache" / "prompts").mkdir(parents=True)
    (c.w / "cache" / "prompts" / "manifest.json").write_text("{broken")
    return ["assets", "list", "--cache", c.w / "cache"]


# ---- data regenerate --------------------------------------------------------------------------------------------

@case("regen-ngram", "data regenerate", "recipe whose drafter is not trained (ngram)", "drafter.type ngram",
      "eagle3")
def _(c):
    return ["data", "regenerate", c.tiny_recipe(), "--out", c.w / "conv.jsonl"]


@case("regen-preset", "data regenerate", "target is a shape preset", "shape preset", "assets fetch")
def _(c):
    return ["data", "regenerate", c.recipe(), "--out", c.w / "conv.jsonl"]


@case("regen-no-weights", "data regenerate", "checkpoint without safetensors", "no *.safetensors", "full checkpoint")
def _(c):
    d = c.ckpt()
    (d / "model.safetensors").unlink()
    return ["data", "regenerate", c.tiny_recipe(_eagle(None), target=d), "--out", c.w / "conv.jsonl"]


@case("regen-truncated", "data regenerate", "truncated safetensors", "model.safetensors", "re-export or re-fetch")
def _(c):
    d = c.ckpt()
    _truncate(d / "model.safetensors")
    return ["data", "regenerate", c.tiny_recipe(_eagle(None), target=d), "--out", c.w / "conv.jsonl"]


@case("regen-no-tokenizer", "data regenerate", "tokenizer files missing", "cannot load a tokenizer", "tokenizer.json")
def _(c):
    d = c.ckpt()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    return ["data", "regenerate", c.tiny_recipe(_eagle(None), target=d), "--out", c.w / "conv.jsonl"]


@case("regen-data-path", "data regenerate", "recipe trains on its own conversations (data.path)",
      "drafter.training.data.path", "nothing to regenerate", "drop data.path")
def _(c):
    return ["data", "regenerate", c.tiny_recipe(_eagle()), "--out", c.w / "conv.jsonl"]


# ---- train -------------------------------------------------------------------------------------------------------

def _eagle(data: str | None = "conv.jsonl") -> dict:
    return {"type": "eagle3", "draft_vocab_size": 64, "training": {
        "max_steps": 1, "batch_size": 2, "seq_len": 64, "precision": "fp32", "data": {"path": data}}}


@case("train-steps-0", "train", "--max-steps 0", "--max-steps 0", "at least 1")
def _(c):
    return ["train", c.tiny_recipe(_eagle()), "--max-steps", "0", "--out", c.w / "train"]


@case("train-out-exists", "train", "--out holds a previous run", "exists", "--resume", "--force")
def _(c):
    (c.w / "train").mkdir()
    (c.w / "train" / "train_log.jsonl").write_text("{}\n")
    return ["train", c.tiny_recipe(_eagle()), "--out", c.w / "train"]


@case("train-data-missing", "train", "data.path does not exist", "drafter.training.data.path", "does not exist")
def _(c):
    return ["train", c.tiny_recipe(_eagle("nowhere.jsonl")), "--out", c.w / "train"]


@case("train-preset", "train", "target is a shape preset", "shape preset", "assets fetch")
def _(c):
    return ["train", c.recipe(), "--out", c.w / "train"]


@case("train-truncated", "train", "truncated safetensors", "model.safetensors", "truncated", "re-export")
def _(c):
    d = c.ckpt()
    _truncate(d / "model.safetensors")
    return ["train", c.tiny_recipe(_eagle(), target=d), "--out", c.w / "train"]


@case("train-shape-mismatch", "train", "tensor shape differs from config.json",
      "model.layers.0.self_attn.q_proj.weight", "config.json implies")
def _(c):
    d = c.ckpt()
    _wrong_shape(d)
    return ["train", c.tiny_recipe(_eagle(), target=d), "--out", c.w / "train"]


@case("train-tokenizer-mismatch", "train", "draft model with another vocabulary", "different vocabulary", "w0")
def _(c):
    d = c.ckpt("draft")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["model"]["vocab"]["zz0"] = tok["model"]["vocab"].pop("w0")
    (d / "tokenizer.json").write_text(json.dumps(tok))
    return ["train", c.tiny_recipe({"type": "draft_model", "model": str(d)}), "--out", c.w / "train"]


@case("train-bad-mask-token", "train", "DFlash mask token not in the vocabulary", "drafter.mask_token", "not a token")
def _(c):
    (c.w / "conv.jsonl").write_text(json.dumps({"id": "a", "messages": [
        {"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3 w4"}]}) + "\n")
    d = {"type": "dflash", "block_size": 4, "mask_token": "<nope>",
         "training": {"max_steps": 1, "seq_len": 64, "precision": "fp32", "data": {"path": "conv.jsonl"}}}
    return ["train", c.tiny_recipe(d), "--out", c.w / "train"]


@case("recipe-noise-online", "recipe validate", "feature noise without offline EAGLE-3 features",
      "drafter.training.feature_noise = 0.2", "offline_features: true")
def _(c):
    return ["recipe", "validate", c.tiny_recipe({"type": "eagle3", "training": {
        "feature_noise": 0.2, "data": {"offline_features": False}}})]


@case("train-features-path-missing", "train", "offline features folder that does not exist",
      "features folder", "nofeatures", "does not exist", "data features")
def _(c):
    (c.w / "conv.jsonl").write_text(json.dumps({"id": "a", "messages": [
        {"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3 w4"}]}) + "\n")
    d = {"type": "eagle3", "draft_vocab_size": 64, "training": {
        "max_steps": 1, "seq_len": 64, "precision": "fp32",
        "data": {"path": "conv.jsonl", "features_path": str(c.w / "nofeatures")}}}
    return ["train", c.tiny_recipe(d), "--out", c.w / "train"]


@case("features-no-conversations", "data features", "conversations file that does not exist",
      "conversations file", "none.jsonl", "data regenerate")
def _(c):
    return ["data", "features", c.tiny_recipe({"type": "eagle3"}), "--conversations", c.w / "none.jsonl",
            "--out", c.w / "feat"]


# ---- doctor ------------------------------------------------------------------------------------------------------

@case("doctor-no-folder", "doctor", "drafter folder does not exist", "nodrafter", "not a folder")
def _(c):
    return ["doctor", c.w / "nodrafter", "--target", c.target]


@case("doctor-bad-target", "doctor", "unknown target", "'llama-9b'", "Presets:")
def _(c):
    (c.w / "drafter").mkdir()
    return ["doctor", c.w / "drafter", "--target", "llama-9b"]


# ---- measure -----------------------------------------------------------------------------------------------------

def _measure(target, *extra, drafter="ngram", d="2") -> list:
    return ["measure", "reference", "--target", target, "--drafter", drafter, "--draft-len", d, "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "4", "--json", *extra]


@case("measure-preset", "measure", "target is a shape preset", "shape preset", "assets fetch")
def _(c):
    return _measure(PRESET)


@case("measure-truncated", "measure", "truncated safetensors", "model.safetensors", "not a readable safetensors")
def _(c):
    d = c.ckpt()
    _truncate(d / "model.safetensors", 0.3)
    return _measure(d)


@case("measure-corrupt-header", "measure", "garbage safetensors header", "model.safetensors", "re-export")
def _(c):
    d = c.ckpt()
    (d / "model.safetensors").write_bytes(b"\xff" * 8 + b"garbage" * 100)
    return _measure(d)


@case("measure-shape-mismatch", "measure", "tensor shape differs from config.json",
      "model.layers.0.self_attn.q_proj.weight", "config.json")
def _(c):
    d = c.ckpt()
    _wrong_shape(d)
    return _measure(d)


@case("measure-wrong-family", "measure", "gpt2 checkpoint", "model_type 'gpt2'", "supported families")
def _(c):
    d = c.ckpt()
    _edit_config(d, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    return _measure(d)


@case("measure-no-tokenizer", "measure", "tokenizer files missing", "cannot load a tokenizer", "tokenizer.json")
def _(c):
    d = c.ckpt()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    return _measure(d)


@case("measure-tokenizer-mismatch", "measure", "draft model with another vocabulary", "vocab_size 300",
      "another target")
def _(c):
    d = c.ckpt("draft", c.draft)
    _edit_config(d, vocab_size=300)
    return _measure(c.target, drafter=str(d))


@case("measure-config-non-utf8", "measure", "config.json in Latin-1", "config.json", "not UTF-8")
def _(c):
    d = c.ckpt()
    (d / "config.json").write_bytes((d / "config.json").read_bytes()[:-1] + b', "x": "caf\xe9"}')
    return _measure(d)


@case("measure-only-pickle", "measure", "pytorch_model.bin only", "no *.safetensors", "full checkpoint")
def _(c):
    d = c.ckpt()
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    return _measure(d)


@case("measure-draft-len-0", "measure", "--draft-len 0", "--draft-len 0", "at least 1")
def _(c):
    return _measure(c.target, d="0")


@case("measure-no-drafter", "measure", "drafter folder does not exist", "neither 'ngram' nor 'suffix' nor an existing "
      "folder")
def _(c):
    return _measure(c.target, drafter=str(c.w / "nodrafter"))


@case("measure-out-inside-target", "measure", "--out inside the target checkpoint", "inside the input",
      "outside it")
def _(c):
    d = c.ckpt()
    return _measure(d, "--out", d / "measured")


@case("measure-template-missing", "measure", "--chat-template does not exist", "chat template file", "does not exist")
def _(c):
    return _measure(c.target, "--chat-template", c.w / "none.jinja")


# ---- build / verify / triton -----------------------------------------------------------------------------------

@case("build-missing-recipe", "build", "recipe does not exist", "nope.yaml", "does not exist")
def _(c):
    return ["build", c.w / "nope.yaml", "--out", c.w / "bundle"]


@case("build-mtp-head", "build", "mtp on a target without native MTP layers", "drafter.type: mtp",
      "no native MTP layers", "eagle3")
def _(c):
    return ["build", c.tiny_recipe({"type": "mtp"}), "--out", c.w / "bundle"]


@case("build-eagle-mtp-head", "build", "a trained EAGLE-MTP head (TensorRT-LLM serves none)",
      "drafter.type eagle_mtp", "num_nextn_predict_layers", "eagle3")
def _(c):
    return ["build", c.tiny_recipe({"type": "eagle_mtp"}), "--out", c.w / "bundle"]


@case("recipe-mtp-head-fields", "recipe validate", "the old spelling of an EAGLE-MTP head (mtp + a head's field)",
      "drafter.draft_vocab_size", "drafter.type: eagle_mtp")
def _(c):
    return ["recipe", "validate", c.tiny_recipe({"type": "mtp", "draft_vocab_size": 64})]


@case("train-mtp-no-native-layers", "train", "mtp (a target's own MTP layers) on a target without them",
      "drafter.type: mtp", "no native MTP layers", "eagle_mtp")
def _(c):
    return ["train", c.tiny_recipe({"type": "mtp"}), "--out", c.w / "train"]


@case("train-mtp-last-layer", "train", "eagle_mtp head with the EAGLE-3-only last_layer start",
      "drafter.training.init_from_target", "none or lm_head")
def _(c):
    return ["train", c.tiny_recipe({"type": "eagle_mtp", "training": {"init_from_target": "last_layer"}}),
            "--out", c.w / "train"]


@case("build-out-exists", "build", "--out holds a bundle", "exists", "--overwrite", "--force")
def _(c):
    (c.w / "bundle").mkdir()
    (c.w / "bundle" / "serve.sh").write_text("keep me")
    return ["build", c.tiny_recipe(), "--out", c.w / "bundle"]


@case("build-out-inside-target", "build", "--out inside the target checkpoint", "inside the input", "outside it")
def _(c):
    d = c.ckpt()
    return ["build", c.tiny_recipe(target=d), "--out", d / "bundle", "--force"]


@case("build-out-is-target", "build", "--out is the target checkpoint (with --force)", "inside the input",
      "outside it")
def _(c):
    d = c.ckpt()
    return ["build", c.tiny_recipe(target=d), "--out", d, "--force"]


@case("build-out-symlink-loop", "build", "--out is a symlink loop", "loop", "another --out")
def _(c):
    return ["build", c.tiny_recipe(), "--out", _self_loop(c.w)]


@case("build-quant-too-small", "build", "int4_awq on a hidden-64 model", "hidden size >= 128",
      leaves=(".bundle.lock",))
def _(c):
    return ["build", c.tiny_recipe(quantization={"method": "int4_awq"}), "--out", c.w / "bundle"]


@case("build-profile-missing", "build", "measure.profile does not exist", "measure.profile", "does not exist",
      leaves=(".bundle.lock",))
def _(c):
    return ["build", c.tiny_recipe(measure={"profile": "gone.json"}), "--out", c.w / "bundle"]


@case("verify-not-folder", "verify", "bundle path is a file", "not a folder", "trtllm-spec build")
def _(c):
    (c.w / "b").write_text("x")
    return ["verify", c.w / "b"]


@case("verify-no-manifest", "verify", "folder without manifest.json", "no manifest.json", "trtllm-spec build")
def _(c):
    (c.w / "b").mkdir()
    return ["verify", c.w / "b"]


@case("verify-manifest-corrupt", "verify", "manifest.json is not JSON", "manifest.json", "not a valid manifest")
def _(c):
    (c.w / "b").mkdir()
    (c.w / "b" / "manifest.json").write_text("{")
    return ["verify", c.w / "b"]


@case("verify-manifest-files-list", "verify", "manifest 'files' is a list", "manifest.json", "not a valid manifest")
def _(c):
    (c.w / "b").mkdir()
    (c.w / "b" / "serve.sh").write_text("x")
    (c.w / "b" / "manifest.json").write_text(json.dumps({"files": ["serve.sh"]}))
    return ["verify", c.w / "b"]


def _fake_bundle(c: Ctx, served: str = "target", **manifest) -> Path:
    from tests.bundle_fakes import seal_bundle

    b = c.w / "b"
    b.mkdir()
    (b / "llm_api_options.yaml").write_text("backend: pytorch\nmax_batch_size: 1\n")
    return seal_bundle(b, "eagle3", "1.2", served=served, **manifest)


@case("triton-not-bundle", "triton", "folder without manifest.json", "no manifest.json", "trtllm-spec build")
def _(c):
    (c.w / "b").mkdir()
    return ["triton", c.w / "b", "--out", c.w / "repo"]


@case("triton-name-escape", "triton", "--model-name ../escape", "'../escape'", "not a valid name")
def _(c):
    return ["triton", _fake_bundle(c), "--out", c.w / "repo", "--model-name", "../escape"]


@case("triton-name-slash", "triton", "--model-name a/b", "'a/b'", "no path separators")
def _(c):
    return ["triton", _fake_bundle(c), "--out", c.w / "repo", "--model-name", "a/b"]


@case("triton-served-absolute", "triton", "manifest serves /etc (outside the bundle)", "'/etc'",
      "relative to the bundle root")
def _(c):
    return ["triton", _fake_bundle(c, served="/etc"), "--out", c.w / "repo"]


@case("triton-served-escape", "triton", "manifest serves ../../secrets (escapes the bundle)", "'../../secrets'",
      "inside the bundle")
def _(c):
    return ["triton", _fake_bundle(c, served="../../secrets"), "--out", c.w / "repo"]


@case("triton-out-inside-bundle", "triton", "--out inside the bundle", "inside the input", "outside it")
def _(c):
    b = _fake_bundle(c)
    return ["triton", b, "--out", b / "repo"]


@case("triton-manifest-incomplete", "triton", "manifest without recipe", "manifest.json", "rebuild")
def _(c):
    b = _fake_bundle(c)
    m = json.loads((b / "manifest.json").read_text())
    del m["recipe"]
    (b / "manifest.json").write_text(json.dumps(m))
    return ["triton", b, "--out", c.w / "repo"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_unwritable_out_parent(cli, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        before = snapshot(tmp_path)
        r = cli("plan", "--target", PRESET, "--batch-sizes", "1", "--no-compare", "--out", ro / "plan")
        assert_clean_failure(r.output, r.exit_code, 2, ["permission denied", "another --out"], before,
                             snapshot(tmp_path))
    finally:
        ro.chmod(0o700)


# ---- the test -----------------------------------------------------------------------------------------------------

def test_at_least_40_cases():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input(bad: Case, cli, tmp_path, tiny_target, tiny_draft, tiny_suite, monkeypatch):
    w = tmp_path / "w"
    w.mkdir()
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))  # outside the watched folder
    monkeypatch.chdir(w)  # default outputs (out/<recipe>) would land here too
    args = bad.args(Ctx(w, tiny_target, tiny_draft))
    before = snapshot(w)
    r = cli(*args)
    after = {k: v for k, v in snapshot(w).items() if k not in bad.leaves}
    assert_clean_failure(r.output, r.exit_code, bad.code, bad.names, before, after)
