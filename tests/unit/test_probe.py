"""``hw probe --target``: the attention and GEMM probes at the target's own shapes run through the same code on
CPU and CUDA (device as a parameter); here on CPU, with a fake for the CUDA device properties only."""

from __future__ import annotations

import json
import types

import pytest

from tests.conftest import LLAMA_TINY
from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.shape import shape_from_config
from trtllm_spec.runtime.probe import attention_kv_rate, device_facts, probe

torch = pytest.importorskip("torch")
TINY = shape_from_config({**LLAMA_TINY, "num_attention_heads": 8, "num_key_value_heads": 2}, source="tiny")


def test_attention_probe_measures_a_kv_rate_on_cpu():
    rate = attention_kv_rate(torch, "cpu", torch.float32, TINY, batch=2, context=128, reps=2, sync=lambda: None)
    assert 1e6 < rate < 1e13  # bytes/s: positive and finite on any machine


def test_device_facts_cuda_branch_reads_the_device_properties():
    class FakeCudaTorch:  # a fake: this machine has no GPU; the attributes are torch.cuda's documented ones
        cuda = types.SimpleNamespace(get_device_properties=lambda i: types.SimpleNamespace(
            name="NVIDIA H200", total_memory=141 * 10**9, multi_processor_count=132))

    facts = device_facts(FakeCudaTorch, "cuda")
    assert facts == {"name": "probed-cuda", "kind": "gpu", "description": "NVIDIA H200 (probed)",
                     "mem_bytes": 141e9, "sm_count": 132}
    assert device_facts(torch, "cpu")["sm_count"] == 0


def test_probe_target_writes_a_plannable_entry(tmp_path):
    hw = probe(device="cpu", quick=True, target=TINY)
    assert hw.attention_kv_bytes_per_s and hw.gemm_flops_by_m and "attention at model's shapes" in hw.description
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(hw.model_dump(mode="json")))
    again = load_hardware(path)
    assert again.attention_kv_bytes_per_s == hw.attention_kv_bytes_per_s and again.has_gemm_curve("fp32")


def test_probe_plan_gpu_and_cpu_branches():
    """The GPU probe's choices, checked without a GPU: the copy and square GEMMs outgrow an H100/H200's 50-60 MB L2,
    fp16 is measured where tensor cores run it, the target-shaped weights stay far below 80 GB, and decode attention
    runs at a serving batch and context; the CPU probe stays within this machine's memory and time."""
    from trtllm_spec.runtime.probe import probe_plan

    gpu, cpu = probe_plan(True, False, TINY), probe_plan(False, False, TINY)
    assert gpu["copy_bytes"] == 1 << 30 and gpu["k"] ** 2 * 2 > 60e6 and "fp16" in gpu["dtypes"]
    assert gpu["weight_cap_bytes"] <= 64 << 30 and gpu["attention_batch_context"] == (32, 4096)
    assert "fp16" not in cpu["dtypes"] and cpu["weight_cap_bytes"] == 1 << 30 and cpu["copy_bytes"] < gpu["copy_bytes"]
    assert gpu["ms"] == cpu["ms"] and gpu["ms"][:7] == [1, 2, 3, 4, 5, 6, 7]  # every 1 + D a bs-1 plan reads
    assert probe_plan(True, True, None)["ms"] == [1, 4, 16, 64, 256]
    assert all(hasattr(torch, d) for d in gpu["dtypes"].values())


def test_per_layer_overhead_is_measured_interleaved_and_never_recorded_as_zero(monkeypatch):
    """Under `stress-ng --cpu 2` beside the suite, timing 1 then 8 layers once put 8 below 1 (per_layer_s 0): the
    pair is now timed interleaved, measured again when 8 layers are not slower, and refused after three tries."""
    import torch

    from trtllm_spec.errors import UserError
    from trtllm_spec.runtime import probe

    seen = []

    def fake(fns, sync, reps, min_s):  # the first attempt as a busy spell left it, then a clean one
        seen.append(len(fns))
        return (2e-4, 1.5e-4) if len(seen) == 1 else (2e-4, 9e-4)

    monkeypatch.setattr(probe, "_timeit_interleaved", fake)
    it, per_layer = probe.forward_overheads(torch, "cpu", 3, lambda: None)
    assert seen == [2, 2] and per_layer == pytest.approx(1e-4) and it == pytest.approx(1e-4)
    monkeypatch.setattr(probe, "_timeit_interleaved", lambda *a, **k: (2e-4, 2e-4))
    with pytest.raises(UserError, match="too busy to measure a per-layer cost"):
        probe.forward_overheads(torch, "cpu", 3, lambda: None)


def test_interleaved_timing_takes_the_fastest_of_each():
    from trtllm_spec.runtime import probe

    calls = []
    t = probe._timeit_interleaved((lambda: calls.append(1), lambda: calls.append(8)), lambda: None, 4, 0.0)
    assert len(t) == 2 and all(x >= 0 for x in t)
    assert calls[:2] == [1, 8] and calls[2::2] == [1] * (len(calls) // 2 - 1) and len(calls) >= 10  # warm-up + rounds
