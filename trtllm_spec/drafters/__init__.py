"""The drafting mechanisms, one package each (``drafters/<name>/``: its recipe section in ``config.py``, its
descriptor in ``__init__.py``, and whatever else it needs: its reference-decoder runtime, doctor checks, ModelOpt
mode config and plugin, llama.cpp and third-party conversions, layout rules), the folder loader (``load.py``) and
the registry (``registry.py``) that every listing reads: CLI choices, help text, docs, the recipe's union, the
decoding-tag table.

Importing this package registers the built-in mechanisms, in the order every listing shows them, through the same
``registry.register`` call a mechanism from elsewhere uses (docs/architecture.md, "Adding a drafting mechanism").
Nothing below ``drafters`` in the dependency rule imports a mechanism: ``core.recipe`` holds the union the
registrations fill, and a recipe read before this package is imported is refused in one line.
"""

from __future__ import annotations

from trtllm_spec.core.recipe import DEFAULT_DRAFTER
from trtllm_spec.drafters import dflash, dflash2, draft_model, dspark, eagle3, eagle_mtp, mtp, ngram, suffix
from trtllm_spec.drafters.registry import MECHANISMS, check_tags, register

# the built-in mechanisms, in listing order (CLI choices, docs tables, the recipe schema's union)
BUILTIN = (eagle3.Eagle3, mtp.MTP, dflash.DFlash, dspark.DSpark, draft_model.DraftModel, ngram.NGram, suffix.Suffix,
           eagle_mtp.EagleMTP, dflash2.DFlash2)

if not MECHANISMS:  # once per process (a re-import after a test's importlib.reload finds them registered)
    for _mechanism in BUILTIN:
        register(_mechanism())
check_tags()
assert DEFAULT_DRAFTER in MECHANISMS, f"core.recipe.DEFAULT_DRAFTER {DEFAULT_DRAFTER!r} is not a registered mechanism"
