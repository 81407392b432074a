"""The drafter registry: CLI choices, help text, docs and recipe types all come from here (principle 4)."""

from __future__ import annotations

from dataclasses import replace

from trtllm_spec.core.releases import DECODING_TAGS
from trtllm_spec.drafters.base import Mechanism

# name -> descriptor, in registration order (the built-in ones: trtllm_spec/drafters/__init__.py, then any added by
# ``register``); the recipe's union (core.recipe.DRAFTER_CLASS) holds the same names in the same order
MECHANISMS: dict[str, Mechanism] = {}


def register(mechanism: Mechanism) -> Mechanism:
    """Add a drafting mechanism with ONE call: its descriptor names its recipe section (``config_class``), the
    decoding tags it writes (``decoding_types``: tags it introduces are also in ``new_decoding_tags``; a tag already
    registered is shared with the mechanisms that write it) and its mirrored option fields (``trtllm_mirror_fields``);
    the recipe union, the tag table, the registry and the options mirror take it from here (docs/architecture.md,
    "Adding a drafting mechanism"). A descriptor missing one of them, or whose tags do not add up, is refused
    naming it, before anything is registered."""
    from trtllm_spec.core import recipe, releases
    from trtllm_spec.errors import UserError

    name = getattr(mechanism, "name", "") or "?"
    for attr in ("name", "title", "config_class"):
        if not getattr(mechanism, attr, None):
            raise UserError(f"drafter registration {name!r}: '{attr}' is missing; a mechanism names its recipe "
                            "section (config_class), the decoding tags it writes (decoding_types; those it "
                            "introduces also in new_decoding_tags) and title (docs/architecture.md, 'Adding a "
                            "drafting mechanism')")
    if not mechanism.decoding_types and type(mechanism).trtllm_refusal is Mechanism.trtllm_refusal:
        raise UserError(f"drafter registration {name!r}: 'decoding_types' is missing; name the TensorRT-LLM decoding "
                        "tags it writes, or, where TensorRT-LLM cannot serve it, say why in trtllm_refusal")
    if name in MECHANISMS:
        raise UserError(f"drafter registration {name!r}: a mechanism of that name is registered already")
    tags = tuple(mechanism.decoding_types)
    new = {t.tag: t for t in mechanism.new_decoding_tags}
    for tag in new:
        if tag not in tags:
            raise UserError(f"drafter registration {name!r}: new_decoding_tags has {tag!r}, which its decoding_types "
                            f"{tags} lack; list every tag it writes in decoding_types")
        if tag in releases.DECODING_TAGS:
            raise UserError(f"drafter registration {name!r}: decoding tag {tag!r} is registered already (written by "
                            f"{', '.join(releases.DECODING_TAGS[tag].drafters)}); to share it, leave it out of "
                            "new_decoding_tags and keep it in decoding_types")
    unknown = [t for t in tags if t not in new and t not in releases.DECODING_TAGS]
    if unknown:
        raise UserError(f"drafter registration {name!r}: decoding tag {unknown[0]!r} is not registered; introduce it "
                        f"in new_decoding_tags (a core.releases.DecodingTag with its first release) or share one of "
                        f"{', '.join(releases.DECODING_TAGS)}")
    if (recipe_type := recipe.section_type(mechanism.config_class)) != name:
        raise UserError(f"drafter registration {name!r}: its config_class's type is {recipe_type!r}; they must match")
    recipe.register_drafter_class(mechanism.config_class)
    for tag in tags:
        if tag in new:
            releases.register_tag(replace(new[tag], drafters=(name,)))
        else:
            releases.share_tag(tag, name)
    MECHANISMS[name] = mechanism
    return mechanism


def unregister(name: str) -> None:
    """Remove a mechanism added by ``register`` (tests): the tags it introduced go, the tags it shared lose it."""
    from trtllm_spec.core import recipe, releases

    mech = MECHANISMS.pop(name, None)
    new = {t.tag for t in getattr(mech, "new_decoding_tags", ())}
    for tag in getattr(mech, "decoding_types", ()):
        if tag in new:
            releases.unregister_tag(tag)
        else:
            releases.unshare_tag(tag, name)
    recipe.unregister_drafter_class(name)


def decoding_types(tag: str) -> tuple[str, ...]:
    """The registered mechanisms that write ``tag`` (several where they share it), from their descriptors."""
    return tuple(name for name, m in MECHANISMS.items() if tag in m.decoding_types)


def get(name: str) -> Mechanism:
    from trtllm_spec.errors import UserError

    if name not in MECHANISMS:
        raise UserError(f"unknown drafter type {name!r}; valid: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


def check_tags() -> None:
    """The tag table (core.releases.DECODING_TAGS: tag -> the mechanisms that write it, read where no descriptor may
    be imported) and the descriptors' decoding_types say the same (register / unregister keep them so; the
    built-in registrations end with this check)."""
    assert all(t.drafters == decoding_types(tag) for tag, t in DECODING_TAGS.items()), \
        "core.releases.DECODING_TAGS and the descriptors' decoding_types must name the same mechanisms per tag"
    assert all(t in DECODING_TAGS for m in MECHANISMS.values() for t in m.decoding_types), \
        "every tag a descriptor writes is in core.releases.DECODING_TAGS"


def folderless() -> tuple[str, ...]:
    """Mechanisms the reference decoder builds without a folder: their names are ``measure --drafter`` spec
    tokens."""
    return tuple(name for name, m in MECHANISMS.items() if m.folderless)


def exported_type(cfg: dict) -> str | None:
    """The mechanism whose exported folder has this config.json (torch-free); None when none matches.
    Drafter layouts are tried first, a plain (draft) model last."""
    order = sorted(MECHANISMS.values(), key=lambda m: m.recognised_last)
    return next((m.name for m in order if m.recognises(cfg)), None)


def folder_refusal(cfg: dict, where: str, expect: str | None = None) -> str | None:
    """Why a folder's config.json cannot run as drafter type ``expect`` (with none: as any mechanism whose layout
    it resembles, for a folder none recognises): the descriptors' ``folder_refusal``; None: nothing to refuse."""
    if expect is None and exported_type(cfg) is not None:
        return None  # a folder a mechanism recognises is that mechanism's
    mechs = (get(expect),) if expect is not None else tuple(MECHANISMS.values())
    return next((why for m in mechs if (why := m.folder_refusal(cfg, where))), None)


def offline_capture(drafter, target_config: dict) -> tuple[int, ...]:
    """The target layers offline training captures for the recipe's ``drafter`` section (empty: it trains online):
    the descriptor's layers, as SaveState dumps them. The stages and the training run ask this and pass the
    layers to ``data`` (budget, regeneration, features), which reads no descriptor."""
    if not drafter.offline_features():
        return ()
    return tuple(sorted(get(drafter.type).savestate_layers(drafter, target_config)))
