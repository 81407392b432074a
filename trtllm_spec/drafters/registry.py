"""The drafter registry: CLI choices, help text, docs and recipe types all come from here (principle 4)."""

from __future__ import annotations

from trtllm_spec.core.recipe import DRAFTER_TYPES
from trtllm_spec.core.releases import DECODING_TAGS
from trtllm_spec.drafters.base import Mechanism
from trtllm_spec.drafters.dflash import DFlash, DSpark
from trtllm_spec.drafters.draft_model import DraftModel
from trtllm_spec.drafters.eagle3 import Eagle3
from trtllm_spec.drafters.eagle_mtp import EagleMTP
from trtllm_spec.drafters.mtp import MTP
from trtllm_spec.drafters.ngram import NGram
from trtllm_spec.drafters.suffix import Suffix

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (Eagle3(), MTP(), DFlash(), DSpark(), DraftModel(), NGram(),
                                                        Suffix(), EagleMTP())}
assert tuple(MECHANISMS) == DRAFTER_TYPES, "recipe drafter types and the registry must list the same names"


def register(mechanism: Mechanism) -> Mechanism:
    """Add a drafting mechanism with ONE call: its descriptor names its recipe section (``config_class``), its
    decoding tags (``new_decoding_tags``) and its mirrored option fields (``trtllm_mirror_fields``); the recipe
    union, the tag table, the registry and the options mirror take it from here (docs/architecture.md, "Adding a
    drafting mechanism"). A descriptor missing one of them is refused naming it."""
    from trtllm_spec.core import recipe, releases
    from trtllm_spec.errors import UserError

    name = getattr(mechanism, "name", "") or "?"
    for attr in ("name", "title", "config_class", "new_decoding_tags"):
        if not getattr(mechanism, attr, None):
            raise UserError(f"drafter registration {name!r}: '{attr}' is missing; a mechanism names its recipe "
                            "section (config_class), its decoding tags (new_decoding_tags) and title "
                            "(docs/architecture.md, 'Adding a drafting mechanism')")
    if name in MECHANISMS:
        raise UserError(f"drafter registration {name!r}: a mechanism of that name is registered already")
    if recipe.register_drafter_class(mechanism.config_class) != name:
        recipe.unregister_drafter_class(recipe_type := next(iter(reversed(recipe.DRAFTER_CLASS))))
        raise UserError(f"drafter registration {name!r}: its config_class's type is {recipe_type!r}; they must match")
    for tag in mechanism.new_decoding_tags:
        releases.register_tag(tag)
    MECHANISMS[name] = mechanism
    DECODING_TYPES.update((t, name) for t in mechanism.decoding_types)
    return mechanism


def unregister(name: str) -> None:
    """Remove a mechanism added by ``register`` (tests)."""
    from trtllm_spec.core import recipe, releases

    mech = MECHANISMS.pop(name, None)
    for tag in getattr(mech, "new_decoding_tags", ()):
        releases.unregister_tag(tag.tag)
        DECODING_TYPES.pop(tag.tag, None)
    recipe.unregister_drafter_class(name)


def get(name: str) -> Mechanism:
    from trtllm_spec.errors import UserError

    if name not in MECHANISMS:
        raise UserError(f"unknown drafter type {name!r}; valid: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


# TensorRT-LLM decoding_type tag -> our drafter type (reading a bundle's options back): core.releases.DECODING_TAGS
DECODING_TYPES = {tag: name for name, m in MECHANISMS.items() for tag in m.decoding_types}
assert all(t.drafter in MECHANISMS for t in DECODING_TAGS.values()), "every decoding tag runs a registered drafter"


# mechanisms the reference decoder builds without a folder: their names are ``measure --drafter`` spec tokens
FOLDERLESS = tuple(name for name, m in MECHANISMS.items() if m.folderless)


def exported_type(cfg: dict) -> str | None:
    """The mechanism whose exported folder has this config.json (torch-free); None when none matches.
    Drafter layouts are tried first, a plain (draft) model last."""
    order = sorted(MECHANISMS.values(), key=lambda m: m.recognised_last)
    return next((m.name for m in order if m.recognises(cfg)), None)


def offline_capture(drafter, target_config: dict) -> tuple[int, ...]:
    """The target layers offline training captures for the recipe's ``drafter`` section (empty: it trains online):
    the descriptor's layers, as SaveState dumps them. The stages and the training run ask this and pass the
    layers to ``data`` (budget, regeneration, features), which reads no descriptor."""
    if not drafter.offline_features():
        return ()
    return tuple(sorted(get(drafter.type).savestate_layers(drafter, target_config)))
