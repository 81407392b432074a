"""One record per TensorRT-LLM release profile (``engine.trtllm_version``): everything the project knows about a
release is written here once, and the recipe's choices, the CLI's choices, the options mirror, the schedule gates,
the host-cost profiles, the scripts' container image and the release columns of docs/trtllm_compat.md derive
from it (tests/unit/test_releases.py checks the last two).

Sources (each fact with its release):

- 1.2: a 1.2-era ``tensorrt_llm/llmapi/llm_args.py`` (TensorRT-LLM 1.2.1, the newest final release on PyPI;
  ``nvcr.io/nvidia/tensorrt-llm/release:1.2.1``); the TensorRT backend is still in its wheel.
- 1.3: NVIDIA/TensorRT-LLM main after the 1.3.0rc2x tags (``llm_args.py`` @0004396720) and the 1.3.0rc27 LLM API
  reference pages; no 1.3.0 final existed when this was read.
- 1.4: the 1.4.0rc1 and 1.4.0rc4 LLM API reference pages (``{Eagle3,MTP,DFlash,DSpark,SA}DecodingConfig.html``),
  PR #18721 (two-model path removed, 2026-09-04), PR #12905 (acceptance gate renamed).

Schedule rules (docs/trtllm_compat.md, "Where a schedule takes effect"): 1.2 reads ``draft_len_schedule`` keys as
lower thresholds (key 1 required) and its one-model path applies none (dynamic draft length arrived with PR
#10860, after the 1.2 branch); 1.3+ reads keys as upper thresholds; main floors one-engine modes at
``min_runtime_draft_len = 1``, and the 1.4 pages do not settle whether 1.4 has that floor, so a 1.4 plan never
relies on a tier switching speculation off. Which mechanisms apply a schedule is the descriptor's
``dynamic_draft_len_since`` (a release), compared with :func:`order`.

Adding a release: one :func:`register` call with a :class:`Release` (tests/unit/test_releases.py registers a toy
"1.5"); docs/architecture.md, "Adding a TensorRT-LLM release", lists what else a real release may need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from trtllm_spec.errors import UserError

_NAME = re.compile(r"\d+(\.\d+)+")


def order(name: str) -> tuple[int, ...]:
    """The numeric order of a release name: "1.10" > "1.9" (strings would sort it first)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UserError(f"TensorRT-LLM release {name!r} is not a release name like '1.3'; known: {', '.join(RELEASES)}")
    return tuple(int(p) for p in name.split("."))


@dataclass(frozen=True)
class DecodingTag:
    """A ``speculative_config.decoding_type`` value: the drafter types that write it, the first release whose LLM
    API accepts it and the first that no longer does (None: still accepted).

    A tag may be shared: TensorRT-LLM can run several mechanisms under one ``decoding_type`` and tell them apart
    by the drafter checkpoint's architecture (issue 45 reports that PR #18155 runs DFlash2 as ``decoding_type:
    DFlash``; not checked against TensorRT-LLM's source here). ``drafters`` lists
    every mechanism that writes the tag (each descriptor declares its tags: ``Mechanism.decoding_types``;
    ``drafters/registry.py`` checks that both say the same); a reader that maps a tag to a drafter type matches
    ``type in tag_types(tag)`` and takes what tells sharers apart (a bundle's record of its drafter type, the
    checkpoint's architecture) from elsewhere: a shared tag alone is never resolved to one of them (``tag_type``).
    One name is accepted for ``drafters`` and read as a tuple of one."""

    tag: str
    drafters: tuple[str, ...]
    since: str
    removed: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.drafters, str):
            object.__setattr__(self, "drafters", (self.drafters,))
        else:
            object.__setattr__(self, "drafters", tuple(self.drafters))


# the tags the LLM API accepts (the first listed for a drafter is not necessarily the one written: the
# descriptor's trtllm_speculative_config chooses per release). "Eagle": EAGLE-3 on the PyTorch backend, the only
# spelling of the 1.2-era parsers; deprecated by PR #10124 (main, Dec 2025) but still accepted by the 1.4 pages.
DECODING_TAGS: dict[str, DecodingTag] = {t.tag: t for t in (
    DecodingTag("Eagle", ("eagle3",), "1.2"), DecodingTag("Eagle3", ("eagle3",), "1.2"),
    DecodingTag("MTP", ("mtp",), "1.2"), DecodingTag("NGram", ("ngram",), "1.2"),
    DecodingTag("Draft_Target", ("draft_model",), "1.2"),
    DecodingTag("DFlash", ("dflash", "dflash2"), "1.3"), DecodingTag("DSpark", ("dspark",), "1.3"),
    DecodingTag("SA", ("suffix",), "1.3"),
)}
# spellings seen in TensorRT-LLM's docs and reports that are not the pydantic Literal
# (docs/source/features/speculative-decoding.md; trtllm-bench decoding_stats.mode): read as the tag, refused in an
# options file naming the tag
TAG_ALIASES: dict[str, str] = {"DraftTarget": "Draft_Target"}
# modes trtllm-bench may report that we do not write, with the drafter type whose acceptance they measure
# (PARD: a parallel draft model, 1.3.0rc27's PARDDecodingConfig; its acceptance is a draft model's)
REPORT_MODES: dict[str, str] = {"PARD": "draft_model"}


@dataclass(frozen=True)
class Release:
    """What one TensorRT-LLM release profile means to a bundle."""

    name: str  # "1.3": the recipe's engine.trtllm_version
    image: str  # the container image of the release the mirror was read from (docker reference, no registry '#')
    read_from: str  # what the mirror of this release was read from
    final: bool  # a final release (not only release candidates) exists
    # ``engine.trtllm_version: auto`` may pick it: what the mirror holds was read from the release itself or a late
    # release candidate, and no open question changes what a bundle for it writes (docs/trtllm_compat.md, "Which
    # release auto picks")
    stable: bool
    mirror_base: str | None = None  # the release whose option fields this one has, unchanged (None: its own)
    # (speculative_config key, value) -> why this release refuses it
    removed: dict[tuple[str, object], str] = field(default_factory=dict)
    # speculative_config keys of earlier releases this one reads under another name: old -> new (and why)
    renamed: dict[str, str] = field(default_factory=dict)
    upper_thresholds: bool = True  # draft_len_schedule keys are upper thresholds (1.3+) or lower ones (1.2)
    max_concurrency: bool = True  # DecodingBaseConfig.max_concurrency exists
    schedule_switches_off: bool = True  # a tier of 0, or a batch above the largest key, stops speculation
    host_costs: str = ""  # key of the host-cost profile (core/host_costs.TRTLLM_HOST_PROFILES); default: name
    tensorrt_backend: bool = False  # the TensorRT (engine) backend still ships
    # cuda_graph_config.max_batch_size may be written beside batch_sizes (1.2: the 1.2-era parser A refuses the two
    # together, TorchLlmArgs.validate_cuda_graph_config; R12 derives it as max(batch_sizes))
    cuda_graph_max_batch_size: bool = True
    # DSparkDecodingConfig has confidence-scheduled verification (enable_confidence_scheduling and its step-cost
    # table, confidence_cost_table_path; the 1.4.0rc4 reference page): a bundle carries the table (planner/
    # dspark_table.py)
    confidence_scheduling: bool = False
    # how this release spells what every release has (the options builder writes these): the EAGLE-3 tag, the
    # drafter folder key, MTP's draft-length knob
    spelling: dict[str, str] = field(default_factory=lambda: dict(_SPELLING))
    refs: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[int, ...]:
        return order(self.name)

    @property
    def tags(self) -> tuple[str, ...]:
        """The decoding tags this release accepts."""
        return tuple(t.tag for t in DECODING_TAGS.values() if knows(self.name, t))

    @property
    def host_cost_key(self) -> str:
        return self.host_costs or self.name


_SPELLING = {"eagle3_tag": "Eagle3", "draft_model_key": "speculative_model", "mtp_draft_len_key": "max_draft_len"}
# 1.2: every 1.2-era llm_args.py reads EAGLE-3 as "Eagle" with speculative_model_dir (the older from_dict parser
# knows only those; the later union keeps EagleDecodingConfig run as EAGLE-3 on PyTorch and the alias); its
# MTPDecodingConfig validator sets max_draft_len from num_nextn_predict_layers (docs/trtllm_compat.md)
_SPELLING_12 = {"eagle3_tag": "Eagle", "draft_model_key": "speculative_model_dir",
                "mtp_draft_len_key": "num_nextn_predict_layers"}
_ACCEPTANCE_RENAMES = {
    "acceptance_window": "acceptance_rate_window_size (a window over speculation iterations)",
    "acceptance_length_threshold": "acceptance_rate_threshold (on accepted/drafted, in [0, 1])"}

RELEASES: dict[str, Release] = {}


def register(release: Release) -> Release:
    """Add a release profile (one call per release); a record missing a required fact is refused naming it."""
    for name in ("name", "image", "read_from"):
        if not getattr(release, name, None):
            raise UserError(f"TensorRT-LLM release record {release.name or '?'!r}: '{name}' is missing; every "
                            "release names its image and what its mirror was read from")
    order(release.name)
    if release.mirror_base is not None and release.mirror_base not in RELEASES:
        raise UserError(f"TensorRT-LLM release record {release.name!r}: mirror_base {release.mirror_base!r} is not "
                        f"a registered release ({', '.join(RELEASES)})")
    RELEASES[release.name] = release
    ordered = sorted(RELEASES.values(), key=lambda r: r.key)
    RELEASES.clear()
    RELEASES.update((r.name, r) for r in ordered)
    return release


def unregister(name: str) -> None:
    """Remove a registered release (tests)."""
    RELEASES.pop(name, None)


register(Release(
    "1.2", image="nvcr.io/nvidia/tensorrt-llm/release:1.2.1", final=True, stable=True,
    read_from="a 1.2-era tensorrt_llm/llmapi/llm_args.py (TensorRT-LLM 1.2.1)",
    upper_thresholds=False, max_concurrency=False, schedule_switches_off=True, tensorrt_backend=True,
    cuda_graph_max_batch_size=False, spelling=_SPELLING_12,
    refs=("tensorrt_llm/llmapi/llm_args.py (release 1.2)", "docs/source/legacy/tensorrt-backend-removal.md")))
register(Release(
    "1.3", image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc27", final=False, stable=True,
    read_from="llm_args.py @0004396720 (main after 1.3.0rc2x) and the 1.3.0rc27 LLM API reference pages",
    renamed=_ACCEPTANCE_RENAMES,
    refs=("PR #10860 (dynamic draft length on the one-model path)", "PR #12262 (support_dynamic_draft_len)",
          "PR #12905 (acceptance gate renamed)")))
register(Release(
    "1.4", image="nvcr.io/nvidia/tensorrt-llm/release:1.4.0rc4", final=False, stable=False,
    read_from="the 1.4.0rc1 and 1.4.0rc4 LLM API reference pages",
    renamed=_ACCEPTANCE_RENAMES, schedule_switches_off=False, confidence_scheduling=True,
    removed={("eagle3_one_model", False): "TensorRT-LLM 1.4 removed the two-model EAGLE-3 path (PR #18721); drop "
                                          "eagle3_one_model (one-model is the only path)",
             ("mtp_eagle_one_model", False): "TensorRT-LLM 1.4 removed the two-model MTP-Eagle path (PR #18721); "
                                             "drop mtp_eagle_one_model"},
    refs=("PR #18721 (two-model path removed)", "PR #12905", "1.4.0rc1 / rc4 API pages")))


def names() -> tuple[str, ...]:
    """The release profiles, oldest first."""
    return tuple(RELEASES)


def get(name: str, what: str = "TensorRT-LLM release") -> Release:
    """The record of ``name``; an unknown name or one newer than any record is one line naming the known ones."""
    if name in RELEASES:
        return RELEASES[name]
    known = ", ".join(repr(r) for r in RELEASES)
    if isinstance(name, str) and _NAME.fullmatch(name) and order(name) > max(r.key for r in RELEASES.values()):
        raise UserError(f"{what} {name!r} is newer than any release trtllm-spec knows ({known}): its options "
                        f"have not been mirrored; use {list(RELEASES)[-1]!r}, or add a release record "
                        "(docs/architecture.md, 'Adding a TensorRT-LLM release')")
    raise UserError(f"unknown {what} {name!r}; known: {known}")


def knows(release: str, tag: DecodingTag) -> bool:
    key = order(release)
    return order(tag.since) <= key and (tag.removed is None or key < order(tag.removed))


def at_least(release: str, since: str | None) -> bool:
    """``release`` is ``since`` or later (False where ``since`` is None: never)."""
    return since is not None and order(release) >= order(since)


def first_at_least(since: str | None) -> str | None:
    """The oldest registered release that is ``since`` or later."""
    return next((r for r in RELEASES if at_least(r, since)), None)


def newest(stable_only: bool = False) -> str:
    pool = [r for r in RELEASES.values() if r.stable or not stable_only]
    return pool[-1].name


def auto_release(needs: str, tensorrt_backend: bool = False) -> str:
    """What ``engine.trtllm_version: auto`` resolves to: the newest stable release that runs the drafter (``needs``:
    the first release with everything its section asks for) and the backend; the drafter's own first release
    where no stable one does. Why the newest and not the first: the per-batch draft_len_schedule, the planner's
    headline, is applied from 1.3 on (no 1.2 mechanism applies one), so the oldest release would switch it off
    by default (docs/trtllm_compat.md, "Which release auto picks")."""
    pool = [r.name for r in RELEASES.values() if r.stable and order(r.name) >= order(needs)
            and (r.tensorrt_backend or not tensorrt_backend)]
    return pool[-1] if pool else needs


def default_release() -> str:
    """The release an interface that takes one assumes when it is not told (``PlanRequest``, an engine report
    without a bundle): what ``auto`` resolves to for a drafter every release runs on the PyTorch backend."""
    return auto_release(names()[0])


def tag_types(tag: str) -> tuple[str, ...]:
    """Every drafter type that writes a decoding tag (one of its aliases, or a reported mode): one for most tags,
    several where mechanisms share it; () where the tag is unknown."""
    t = DECODING_TAGS.get(TAG_ALIASES.get(tag, tag))
    if t is not None:
        return t.drafters
    return (REPORT_MODES[tag],) if tag in REPORT_MODES else ()


def shared_tag_error(where: str, tag: str, fix: str) -> UserError:
    """The one line for a decoding tag that several mechanisms write, read where nothing tells them apart."""
    kinds = tag_types(tag)
    return UserError(f"{where} {tag!r}: {len(kinds)} drafter types share this TensorRT-LLM decoding tag "
                     f"({', '.join(kinds)}) and nothing here says which ran; {fix}")


def tag_type(tag: str, where: str = "decoding_type", fix: str = "name the drafter type") -> str | None:
    """Our drafter type for a decoding tag, one of its aliases or a reported mode (None: unknown). A tag several
    mechanisms share is not resolved here (never guessed): UserError naming ``where``, the tag, the sharers and
    ``fix``; a reader that knows the drafter (a bundle's record) matches ``drafter in tag_types(tag)``."""
    kinds = tag_types(tag)
    if len(kinds) > 1:
        raise shared_tag_error(where, tag, fix)
    return kinds[0] if kinds else None


def tag_since(tag: str) -> str | None:
    t = DECODING_TAGS.get(tag)
    return t.since if t else None


def register_tag(tag: DecodingTag) -> None:
    """Add a decoding tag (a new mechanism's; one call from its descriptor's registration)."""
    order(tag.since)
    DECODING_TAGS[tag.tag] = tag


def unregister_tag(tag: str) -> None:
    DECODING_TAGS.pop(tag, None)


def share_tag(tag: str, drafter: str) -> None:
    """Add ``drafter`` to the mechanisms that write an existing tag (a registered mechanism that shares it)."""
    t = DECODING_TAGS[tag]
    if drafter not in t.drafters:
        DECODING_TAGS[tag] = replace(t, drafters=(*t.drafters, drafter))


def unshare_tag(tag: str, drafter: str) -> None:
    """Remove ``drafter`` from a shared tag's mechanisms (tests; ``drafters/registry.unregister``)."""
    t = DECODING_TAGS.get(tag)
    if t is not None and drafter in t.drafters:
        DECODING_TAGS[tag] = replace(t, drafters=tuple(d for d in t.drafters if d != drafter))
