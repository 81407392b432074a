"""Safety: no network at run time (only ``assets fetch`` may use it), no unpickling of untrusted data, no
``trust_remote_code`` unless the recipe says so (and then it is printed), a non-root Docker image, and bundles
free of credentials and of the build machine's absolute paths."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.reliability.conftest import NetworkUsed

PACKAGE = REPO / "trtllm_spec"


# ---- no network --------------------------------------------------------------------------------------------

def test_socket_block_is_active(no_network):
    with pytest.raises(NetworkUsed):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    with pytest.raises(NetworkUsed), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect(("127.0.0.1", 9))
    a, b = socket.socketpair()  # local IPC stays allowed
    a.close()
    b.close()
    assert len(no_network) == 2
    no_network.clear()


def _recipe(tmp: Path, target_path: Path, drafter: dict, **extra) -> Path:
    data = {"name": "safe", "target": {"model": str(target_path)}, "drafter": drafter, "hardware": {"gpu": "l40s"},
            "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32}, "planner": {"max_draft_len": 4},
            "measure": {"num_prompts": 1, "max_new_tokens": 8, "categories": ["coding"]}} | extra
    p = tmp / "safe.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_no_network_plan_train_measure(cli, tmp_path, tiny_target, tiny_suite, no_network, monkeypatch):
    """The autouse fixture fails the test on any IP connection attempt; every command runs here offline."""
    from tests.tiny import write_conversations

    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100", "--batch-sizes", "1,8", "--json")
    assert r.exit_code == 0, r.output
    data = write_conversations(tmp_path / "c.jsonl", 8)
    drafter = {"type": "eagle3", "draft_vocab_size": 64, "training": {
        "max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 2,
        "data": {"path": str(data), "eval_fraction": 0.25}}}
    r = cli("train", _recipe(tmp_path, tiny_target, drafter), "--out", tmp_path / "train")
    assert r.exit_code == 0, r.output
    r = cli("measure", "reference", "--target", tiny_target, "--drafter", "ngram", "--draft-len", "2", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "6", "--out", tmp_path / "measured")
    assert r.exit_code == 0, r.output
    assert no_network == []


FAKE_TOKEN = "hf_" + "FakeSecretTokenForTests0123456789"
CREDENTIALS = [re.compile(p) for p in (
    r"hf_[A-Za-z0-9]{20,}", r"HF_TOKEN", r"HUGGING_FACE_HUB_TOKEN", r"(?i)password\s*[=:]", r"(?i)api[_-]?key",
    r"(?i)secret[_-]?key", r"AKIA[0-9A-Z]{16}", r"-----BEGIN [A-Z ]*PRIVATE KEY-----", r"(?i)authorization:\s*bearer",
)]


@pytest.fixture
def bundle(cli, tmp_path, tiny_target, tiny_suite, monkeypatch, no_network) -> Path:
    """An n-gram bundle built on the tiny target with a token in the environment, from another folder."""
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", FAKE_TOKEN)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"})
    r = cli("build", recipe, "--out", tmp_path / "bundle")
    assert r.exit_code == 0, r.output
    assert no_network == []
    return tmp_path / "bundle"


def _machine_paths(tmp_path: Path, target: Path) -> set[str]:
    paths = {tmp_path, target, Path.home(), Path.cwd(), REPO, Path(sys.prefix), Path(sys.base_prefix),
             Path(tempfile.gettempdir()), Path(sys.executable).parent}
    out = set()
    for p in paths:
        for form in (p, p.resolve()):
            if len(str(form)) > 1:
                out.add(str(form))
    return out


def test_bundle_has_no_machine_paths_or_credentials(bundle, tmp_path, tiny_target):
    files = [p for p in bundle.rglob("*") if p.is_file() or p.is_symlink()]
    assert files and not [p for p in files if p.is_symlink()], "a bundle holds plain files only"
    paths = _machine_paths(tmp_path, tiny_target)
    for p in files:
        text = p.read_bytes().decode("utf-8", errors="replace")
        rel = p.relative_to(bundle)
        leaked = [m for m in paths if m in text]
        assert not leaked, f"{rel} holds absolute paths of the build machine: {leaked}"
        found = [c.pattern for c in CREDENTIALS if c.search(text)]
        assert not found, f"{rel} looks like it holds credentials: {found}"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert all(not k.startswith("/") and ".." not in k.split("/") for k in manifest["files"])


def test_bundle_trust_remote_code_only_when_the_recipe_says(bundle, cli, tmp_path, tiny_target):
    assert "trust_remote_code" not in yaml.safe_load((bundle / "llm_api_options.yaml").read_text())
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"},
                     target={"model": str(tiny_target), "trust_remote_code": True})
    r = cli("build", recipe, "--out", tmp_path / "trusting")
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((tmp_path / "trusting" / "llm_api_options.yaml").read_text())["trust_remote_code"] is True


# ---- trust_remote_code ---------------------------------------------------------------------------------------

def test_trust_remote_code_is_off_by_default_and_printed_when_on(cli, tmp_path):
    from trtllm_spec.core.recipe_load import recipe_from_dict

    base = {"target": {"model": "qwen3-8b"}, "drafter": {"type": "eagle3"}}
    assert recipe_from_dict(base).target.trust_remote_code is False
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(base))
    r = cli("recipe", "validate", p)
    assert r.exit_code == 0 and "note: target.trust_remote_code" not in r.output
    p.write_text(yaml.safe_dump({**base, "target": {"model": "qwen3-8b", "trust_remote_code": True}}))
    r = cli("recipe", "validate", p)
    assert r.exit_code == 0 and "note: target.trust_remote_code is true" in r.output, r.output


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _name(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(REPO), ast.parse(path.read_text(encoding="utf-8"))


def test_no_call_enables_trust_remote_code_by_itself():
    """Only the recipe's value travels (build/bundle.py -> trtllm_options.py); no call hard-codes True, and
    transformers' loaders get no trust_remote_code at all (their default is False)."""
    for rel, tree in _sources():
        for call in _calls(tree):
            for kw in call.keywords:
                if kw.arg != "trust_remote_code":
                    continue
                assert not (isinstance(kw.value, ast.Constant) and kw.value.value is True), f"{rel}:{call.lineno}"
                assert not _name(call.func).endswith("from_pretrained"), f"{rel}:{call.lineno}"


# ---- no unpickling -----------------------------------------------------------------------------------------

def test_every_torch_load_is_weights_only():
    found = 0
    for rel, tree in _sources():
        for call in _calls(tree):
            if _name(call.func) == "torch.load":
                found += 1
                kws = {kw.arg: kw.value for kw in call.keywords}
                value = kws.get("weights_only")
                assert isinstance(value, ast.Constant) and value.value is True, \
                    f"{rel}:{call.lineno}: torch.load without weights_only=True"
        for node in ast.walk(tree):  # and no 'from torch import load' that would hide a call from the scan
            if isinstance(node, ast.ImportFrom) and node.module == "torch":
                assert "load" not in {a.name for a in node.names}, f"{rel}:{node.lineno}"
    assert found >= 1  # the trainer's optimizer state and the convert path's pytorch_model.bin


def test_no_pickle_loaders_in_the_package():
    banned = {"pickle.load", "pickle.loads", "pickle.Unpickler", "joblib.load", "dill.load", "dill.loads",
              "cloudpickle.load", "cloudpickle.loads", "marshal.loads", "shelve.open"}
    for rel, tree in _sources():
        for call in _calls(tree):
            assert _name(call.func) not in banned, f"{rel}:{call.lineno}: {_name(call.func)}"
            if _name(call.func).endswith("load") and _name(call.func).startswith(("np.", "numpy.")):
                kws = {kw.arg: kw.value for kw in call.keywords}
                assert not (isinstance(kws.get("allow_pickle"), ast.Constant) and kws["allow_pickle"].value), rel


class _Payload:
    """Unpickling this creates a folder: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def _pickle_checkpoint(tmp_path: Path, tiny_target: Path) -> tuple[Path, Path]:
    import pickle
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_target, folder)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "PWNED"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"model.embed_tokens.weight": _Payload(marker)}))
    return folder, marker


def test_pickle_only_checkpoint_is_refused_and_never_unpickled(cli, tmp_path, tiny_target, tiny_suite):
    from trtllm_spec.drafters.eagle3.convert import load_weights
    from trtllm_spec.errors import UserError
    from trtllm_spec.runtime.llama import LlamaModel

    folder, marker = _pickle_checkpoint(tmp_path, tiny_target)
    with pytest.raises(UserError, match="safetensors"):
        LlamaModel.from_pretrained(folder)  # the runtime loader reads safetensors only
    with pytest.raises(UserError, match="weights_only=True"):
        load_weights(folder)  # the convert path reads a .bin only with weights_only=True, which refuses code
    for args in (["measure", "reference", "--target", folder, "--drafter", "ngram", "--draft-len", "2", "--json",
                  "--categories", "coding", "--num-prompts", "1", "--max-new-tokens", "4"],
                 ["data", "regenerate", _recipe(tmp_path, folder, {"type": "eagle3"}), "--out", tmp_path / "c.jsonl"]):
        r = cli(*args)
        assert r.exit_code == 2 and "no *.safetensors" in r.output, r.output
    assert not marker.exists(), "a pickle was unpickled"


# ---- Docker ------------------------------------------------------------------------------------------------

def test_docker_images_run_as_non_root():
    text = (REPO / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    finals = {}
    for body in stages:
        name = re.match(r"\S+\s+AS\s+(\S+)", body)
        users = re.findall(r"^USER\s+(\S+)", body, re.M)
        if name:
            finals[name.group(1)] = users[-1] if users else None
    for image in ("serve", "train"):
        user = finals.get(image)
        assert user is not None, f"the {image} image sets no USER (it would run as root)"
        assert user.split(":")[0] not in ("root", "0"), f"the {image} image runs as {user}"
