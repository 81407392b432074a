"""The names every command's ``--device`` / ``--dtype`` accept and how a process knows a launcher started it:
plain values, so the CLI reads them without importing torch (``runtime/device.py`` holds the rule that resolves
them; ``train/distributed.py`` the process group)."""

from __future__ import annotations

import os
from typing import Literal, get_args

Device = Literal["auto", "cpu", "cuda"]  # the recipe's fields use these types: one list of names
Dtype = Literal["auto", "bf16", "fp32"]
DEVICES = get_args(Device)
DTYPES = get_args(Dtype)
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # what torchrun (and Slurm wrappers of it) set for each rank


def launched(env=None) -> bool:
    """True in a rank a distributed launcher started."""
    env = os.environ if env is None else env
    return all(k in env for k in LAUNCH_ENV)
