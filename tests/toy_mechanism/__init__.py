"""A toy *trained* drafting mechanism in one folder (issue 45 item 5; docs/architecture.md, "Adding a drafting
mechanism"): everything it is lives here and ``drafters.registry.register(ToyFlash())`` adds it with one call.

ToyFlash is DFlash trained with its feature fusion (``fc``) frozen at its initialisation: its recipe section
(``ToyFlashDrafter``: DFlash's fields plus a training-only ``freeze_fc``), its descriptor, which *shares* the
``DFlash`` decoding tag (TensorRT-LLM would tell the two apart by the checkpoint's architecture, trtllm-spec by the
bundle's record), its ModelOpt plugin (``modelopt_extend``: freeze the fusion layer of the model ModelOpt converted
in DFlash's mode) and its export rewrite (``exported_config``: its own architecture, by which ``recognises`` tells
its folders from DFlash's). Its exported layout is DFlash's, so doctor's ``dflash`` layout checks and DFlash's
runtime drafter serve it unchanged (inherited). ``tests/unit/test_toy_folder_mechanism.py`` runs plan -> build
(train, measure, bundle) -> mirror -> replan -> doctor on it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from trtllm_spec.drafters.dflash import DFlash
from trtllm_spec.drafters.dflash.config import DFlashDrafter

ARCHITECTURE = "ToyFlashDraftModel"


class ToyFlashDrafter(DFlashDrafter):
    training_only: ClassVar[tuple[str, ...]] = (*DFlashDrafter.training_only, "freeze_fc")

    type: Literal["toyflash"] = "toyflash"
    freeze_fc: bool = True


class ToyFlash(DFlash):
    name, title = "toyflash", "ToyFlash (DFlash with a frozen fusion layer)"
    config_class = ToyFlashDrafter  # decoding_types: DFlash's ("DFlash",), inherited: a shared tag

    def default_config(self) -> ToyFlashDrafter:
        return ToyFlashDrafter()

    def recognises(self, cfg: dict) -> bool:
        return (cfg.get("architectures") or [""])[0] == ARCHITECTURE

    def modelopt_extend(self, model, cfg: ToyFlashDrafter) -> None:
        if cfg.freeze_fc:
            model.dflash_module.fc.weight.requires_grad_(False)

    def exported_config(self, config: dict, cfg: ToyFlashDrafter) -> dict:
        return dict(config, architectures=[ARCHITECTURE])
