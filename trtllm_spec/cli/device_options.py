"""``--device auto|cpu|cuda`` and ``--dtype auto|bf16|fp32``: the same options, the same rule
(``runtime/device.py``, reached through the stages) on every command where a model runs."""

from __future__ import annotations

import click

from trtllm_spec.core.devices import DEVICES, DTYPES


def _device_option(default: str):
    return click.option("--device", type=click.Choice(DEVICES), default=None,
                        help=f"Where the model runs (auto: CUDA when torch sees a GPU). Default: {default}.")


device_option = _device_option("the recipe's field, else auto")
dtype_option = click.option(
    "--dtype", type=click.Choice(DTYPES), default=None,
    help="Precision (auto: bf16 on CUDA; on a CPU bf16 only where a timed GEMM shows it faster than fp32).")


def device_options(f):
    """For a command that reads a recipe: its drafter.training.device / precision fields are the default."""
    return device_option(dtype_option(f))


def standalone_device_options(f):
    """For a command without a recipe (``doctor``): auto unless given."""
    return _device_option("auto")(dtype_option(f))


def training_overrides(device: str | None, dtype: str | None) -> tuple[str, ...]:
    """``--set`` overrides for drafter.training.device / precision (the recipe fields of train and regenerate);
    an error about those fields names the flag (``record_flag_origins``)."""
    from trtllm_spec.cli.common import record_flag_origins

    out = ()
    if device is not None:
        out += (f"drafter.training.device={device}",)
        record_flag_origins({"drafter.training.device": "--device"})
    if dtype is not None:
        out += (f"drafter.training.precision={dtype}",)
        record_flag_origins({"drafter.training.precision": "--dtype"})
    return out

