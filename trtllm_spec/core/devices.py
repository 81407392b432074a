"""The names every command's ``--device`` / ``--dtype`` accept and how a process knows a launcher started it:
plain values, so the CLI reads them without importing torch (``runtime/device.py`` holds the rule that resolves
them; ``train/distributed.py`` the process group)."""

from __future__ import annotations

import os

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "bf16", "fp32")
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # what torchrun (and Slurm wrappers of it) set for each rank


def launched(env=None) -> bool:
    """True in a rank a distributed launcher started."""
    env = os.environ if env is None else env
    return all(k in env for k in LAUNCH_ENV)
