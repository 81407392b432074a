"""The ``trtllm-spec`` command line. The only place that prints, exits or knows about terminals.

Each command module registers its commands on ``main``; heavy imports happen inside the commands.
"""

from __future__ import annotations

import trtllm_spec.drafters  # noqa: F401  (registers the built-in mechanisms: every command reads the registry)
from trtllm_spec.cli import (  # noqa: E402,F401  (registers the commands)
    assets,
    build,
    data,
    doctor,
    hw,
    measure,
    plan,
    recipe,
    replan,
    train,
    tune,
)
from trtllm_spec.cli.common import main

__all__ = ["main"]
