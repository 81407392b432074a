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
