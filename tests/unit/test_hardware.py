import json

import pytest

from trtllm_spec.core.hardware import CATALOGUE, load_hardware
from trtllm_spec.errors import HardwareError


def test_catalogue_has_the_named_gpus():
    assert {"h100-sxm", "h200", "b200", "gb200", "b300", "a100-80gb", "l40s"} <= set(CATALOGUE)
    assert CATALOGUE["a100-80gb"].compute_dtype("fp8") == "bf16"  # no fp8 tensor cores
    assert CATALOGUE["b200"].compute_dtype("nvfp4") == "fp4"


@pytest.mark.parametrize("name", ["H100", "h100_sxm", "H200", "A100", "GB200-NVL72"])
def test_aliases(name):
    assert load_hardware(name).name in CATALOGUE


def test_h200_achievable_matches_measured_point():
    h = load_hardware("h200")  # an H200 measured ~790 TFLOP/s bf16 GEMM and ~4.3 TB/s copy
    assert h.gemm_flops_per_s("bf16", 4096) == pytest.approx(790e12, rel=0.02)
    assert h.achievable_mem_bytes_per_s == pytest.approx(4.3e12, rel=0.02)


def test_overrides_and_bad_overrides():
    h = load_hardware("h100", {"efficiency": {"gemm": 0.5}, "mem_bytes_per_s": 3e12})
    assert h.efficiency.gemm == 0.5 and h.efficiency.memory == 0.9 and h.mem_bytes_per_s == 3e12
    with pytest.raises(HardwareError, match="efficiency.gemm"):
        load_hardware("h100", {"efficiency": {"gemm": 2}})
    with pytest.raises(HardwareError, match="unknown key 'bandwidth'"):
        load_hardware("h100", {"bandwidth": 1})


def test_unknown_gpu_lists_valid():
    with pytest.raises(HardwareError, match="h100-sxm.*l40s"):
        load_hardware("h300")


def test_probe_style_file(tmp_path):
    h = CATALOGUE["l40s"].model_copy(update={"name": "probed", "gemm_flops_by_m": {"bf16": {1: 1e12, 64: 64e12}}})
    p = tmp_path / "hw.json"
    p.write_text(json.dumps(h.model_dump(mode="json")))
    loaded = load_hardware(str(p))
    assert loaded.name == "probed"
    assert loaded.gemm_flops_per_s("bf16", 8) == pytest.approx(8e12, rel=0.01)  # log-log interpolated
    p.write_text("{oops")
    with pytest.raises(HardwareError, match="not valid JSON"):
        load_hardware(str(p))
    with pytest.raises(HardwareError, match="does not exist"):
        load_hardware(str(tmp_path / "none.json"))
