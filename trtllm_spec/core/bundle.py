"""A bundle read once: its files checked against ``manifest.json``, then one typed record (release profile,
drafter, options files, recipe, dataset) that ``replan``, ``measure --bundle``, ``triton`` and calibration take.

The manifest is the bundle's own record of what it was built as (``trtllm_profile``, ``drafter.type``); the
record's facts come from it, and the files must agree: the resolved recipe must resolve to the same release
and drafter, and the options' ``decoding_type`` must be a tag of that drafter that the release knows (a tag
several mechanisms share, such as DFlash's, is matched to the manifest's drafter type: ``tag in
descriptor.decoding_types``, never the other way round). A bundle
whose manifest and files disagree is refused in one line (never re-derived from one of them: that is how an
EAGLE-3 bundle raised to 1.3 by ``sa_enhancer`` was once re-planned as 1.2).

The file names a bundle holds are written here once (``deploy/scripts.py`` and the stages import them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.core.files import sha256_file
from trtllm_spec.errors import UserError

MANIFEST = "manifest.json"
RECIPE_FILE = "recipe.resolved.yaml"
OPTIONS_FILE = "llm_api_options.yaml"
PLAIN_OPTIONS_FILE = "llm_api_options.plain.yaml"  # the options without speculation (bench_plain.sh)
SPECULATIVE_OPTIONS_FILE = "llm_api_options.speculative.yaml"  # the drafter where the plan left none (bench_speculative.sh)
CALIBRATE_OPTIONS_FILE = "llm_api_options.calibrate.yaml"  # the drafter at a second D (bench_calibrate.sh)
# the drafter at the bundle's own D with no draft_len_schedule: its run at the second concurrency is one D's
CALIBRATE_MAIN_OPTIONS_FILE = "llm_api_options.calibrate_main.yaml"
# where bench_calibrate.sh writes each file's reports (a report does not name its options file: its folder does)
CALIBRATE_RESULTS = {CALIBRATE_OPTIONS_FILE: "bench_results_calibrate",
                     CALIBRATE_MAIN_OPTIONS_FILE: "bench_results_calibrate_main"}
DATASET_FILE = "dataset.jsonl"
OPTIONS_FILES = (OPTIONS_FILE, SPECULATIVE_OPTIONS_FILE, PLAIN_OPTIONS_FILE, CALIBRATE_OPTIONS_FILE,
                 CALIBRATE_MAIN_OPTIONS_FILE)
TARGET_DIR = "target"  # a small local target copied into the bundle (else the options name its HF id)
DRAFTER_DIR = "drafter"  # an exported drafter's folder (Mechanism.bundle_drafter; a draft model has its own)
REPORT_DIR = "report"  # the report stage: the plan, the overhead report, the measured profile
PLAN_FILE = "plan.json"  # a plan's JSON (in report/; in any 'plan --out' or replan folder)
PROFILE_FILE = "speculation_profile.json"  # a speculation profile (in report/measured/; any 'measure --out')
MEASURED_DIR = f"{REPORT_DIR}/measured"
PLAN_PATH = f"{REPORT_DIR}/{PLAN_FILE}"
PROFILE_PATH = f"{MEASURED_DIR}/{PROFILE_FILE}"
TRTLLM_PROFILE_PATH = f"{REPORT_DIR}/trtllm_{PROFILE_FILE}"  # the trtllm stage's, on a GPU node
OVERHEAD_JSON = f"{REPORT_DIR}/overhead.json"
OVERHEAD_MD = f"{REPORT_DIR}/overhead.md"

# folders the bundle's own scripts write into it (bench.sh, bench_speculative.sh, replan.sh): not bundle content
RUNTIME_OUTPUTS = ("bench_results", "bench_results_speculative", "bench_results_plain", "bench_results_calibrate",
                   "bench_results_calibrate_main", "replan")


@dataclass(frozen=True)
class Bundle:
    """What a built bundle is, as its manifest records it and its files confirm."""

    path: Path
    profile: str  # TensorRT-LLM release profile (core.releases)
    drafter: str  # drafter type
    manifest: dict
    recipe: dict  # recipe.resolved.yaml
    options: dict[str, dict] = field(default_factory=dict)  # options file name -> mapping, for each one present
    dataset: Path | None = None

    @property
    def main_options(self) -> dict:
        return self.options[OPTIONS_FILE]

    @property
    def speculative_file(self) -> str:
        """The options file that speculates: llm_api_options.yaml, or where the planner left the bundle without
        speculation, the drafter's options beside it (what bench_speculative.sh runs)."""
        if self.main_options.get("speculative_config") or SPECULATIVE_OPTIONS_FILE not in self.options:
            return OPTIONS_FILE
        return SPECULATIVE_OPTIONS_FILE

    def speculative_options(self, absolute_paths: bool = False) -> dict:
        """A copy of the speculative options (``speculative_model`` made absolute when asked: the bundle's
        scripts run from its root); UserError where the bundle does not speculate at all."""
        import copy

        name = self.speculative_file
        options = copy.deepcopy(self.options[name])
        spec = options.get("speculative_config")
        if not isinstance(spec, dict):
            raise UserError(f"bundle {self.path}: {name} has no speculative_config; measure and replan need a bundle "
                            "that speculates")
        if absolute_paths and self.drafter_dir is not None:  # the key the release spells (core/releases)
            from trtllm_spec.core import releases

            spec[releases.get(self.profile).spelling["draft_model_key"]] = str(self.drafter_dir.resolve())
        return options

    @property
    def served(self) -> str | None:
        return (self.manifest.get("target") or {}).get("served")

    @property
    def target_dir(self) -> Path | None:
        """The target's folder in the bundle (a small local target is copied into it), or None where the bundle
        names the target by its HF id."""
        served = self.served
        if not isinstance(served, str) or not served or Path(served).is_absolute():
            return None
        folder = self.path / served
        return folder if (folder / "config.json").is_file() and _inside(folder, self.path) else None

    @property
    def drafter_model(self) -> str | None:
        """What the speculative options name as the drafter model, under the key the bundle's release spells it
        (``core.releases`` ``spelling["draft_model_key"]``: ``speculative_model_dir`` on 1.2, ``speculative_model``
        from 1.3): a folder of the bundle, an HF id, or None (n-gram, suffix, MTP's native layers)."""
        from trtllm_spec.core import releases

        spec = self.options[self.speculative_file].get("speculative_config")
        value = spec.get(releases.get(self.profile).spelling["draft_model_key"]) if isinstance(spec, dict) else None
        return value if isinstance(value, str) and value else None

    @property
    def drafter_dir(self) -> Path | None:
        """The drafter's folder in the bundle (``drafter/``, a draft model's ``draft_model/``), as the options name
        it; None where the drafter has no folder here (a model-free or native drafter, a hub id, a deferred
        stage)."""
        value = self.drafter_model
        if value is None or Path(value).is_absolute():
            return None
        folder = self.path / value
        return folder if folder.is_dir() and _inside(folder, self.path) else None

    def recipe_model(self):
        """The resolved recipe as the pydantic ``Recipe`` (it validated when the bundle was read)."""
        from trtllm_spec.core.recipe_load import recipe_from_dict

        return recipe_from_dict(self.recipe, str(self.path / RECIPE_FILE))

    @property
    def report_dir(self) -> Path:
        """``report/``: the plan, the overhead report, the measured profile (the report stage's files)."""
        return self.path / REPORT_DIR

    @property
    def plan_path(self) -> Path:
        return self.path / PLAN_PATH

    @property
    def profile_path(self) -> Path:
        """The speculation profile measured when the bundle was built (absent where measuring was deferred)."""
        return self.path / PROFILE_PATH

    def plan(self) -> dict | None:
        """``report/plan.json`` (None where the bundle has none)."""
        return _json_or_none(self.plan_path)

    def measured_profile(self) -> dict | None:
        """``report/measured/speculation_profile.json`` (None where nothing was measured)."""
        return _json_or_none(self.profile_path)

    def overhead(self) -> dict | None:
        """``report/overhead.json`` (the overhead report; None in a bundle without one)."""
        return _json_or_none(self.path / OVERHEAD_JSON)

    def model_names(self) -> set[str]:
        """The names the bundle's target goes by (what an engine report may call it)."""
        target = self.manifest.get("target") or {}
        names = {str(v) for v in (target.get("served"), target.get("hf_id"), target.get("spec")) if v}
        return names | {Path(n).name for n in names}


def _inside(path: Path, root: Path) -> bool:
    return path.resolve() == root.resolve() or root.resolve() in path.resolve().parents


def _json_or_none(path: Path) -> dict | None:
    if not path.is_file():
        return None
    from trtllm_spec.core.files import read_structured

    data = read_structured(path, "bundle report", UserError)
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object; rebuild the bundle")
    return data


def verify_bundle(bundle: Path) -> dict:
    """{'ok': bool, 'changed': [...], 'missing': [...], 'extra': [...]}; UserError when there is no manifest."""
    path = bundle / MANIFEST
    if not bundle.is_dir():
        raise UserError(f"{bundle} is not a folder; give a bundle written by 'trtllm-spec build'")
    if not path.is_file():
        raise UserError(f"{bundle} has no {MANIFEST}; is it a bundle written by 'trtllm-spec build'?")
    try:
        manifest = json.loads(path.read_text())
        recorded: dict[str, str] = manifest["files"]
        if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
            raise TypeError(recorded)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise UserError(f"{path} is not a valid manifest (unreadable, or 'files' is not a {{path: sha256}} table); "
                        "rebuild the bundle") from None
    actual, links = _bundle_files(bundle)
    missing = sorted(set(recorded) - set(actual) - set(links))
    extra = sorted(set(actual) - set(recorded))
    changed = sorted(k for k in set(recorded) & set(actual) if sha256_file(actual[k]) != recorded[k])
    recipe = recipe_differences(manifest.get("recipe"), bundle / RECIPE_FILE) if RECIPE_FILE in actual else []
    return {"ok": not (missing or extra or changed or links or recipe), "changed": changed, "missing": missing,
            "extra": extra, "symlinks": links, "recipe": recipe, "files": len(recorded)}


def recipe_differences(recorded, resolved: Path) -> list[str]:
    """The key paths at which the manifest's copy of the recipe (``manifest.json["recipe"]``) and
    ``recipe.resolved.yaml`` differ. The recipe is stored twice (the manifest records what the bundle was built
    from; the YAML is what ``trtllm-spec build`` and replan read back); the hashes cover the YAML only, so an
    edited manifest recipe is found here."""
    from trtllm_spec.core.files import read_structured

    try:
        data = read_structured(resolved, "bundle recipe", UserError)
    except UserError as exc:
        return [f"{RECIPE_FILE} ({exc})"]
    if not isinstance(recorded, dict):
        return [f"{MANIFEST} has no recipe mapping"]
    found: list[str] = []
    _diff_paths(json.loads(json.dumps(recorded)), json.loads(json.dumps(data, default=str)), "", found)
    return found


def _diff_paths(a, b, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            here = f"{where}.{key}" if where else str(key)
            if key not in a or key not in b:
                out.append(f"{here} ({'only in ' + RECIPE_FILE if key not in a else 'only in ' + MANIFEST})")
            else:
                _diff_paths(a[key], b[key], here, out)
    elif a != b:
        out.append(f"{where or '(the whole recipe)'} ({MANIFEST} {a!r}, {RECIPE_FILE} {b!r})")


def _bundle_files(bundle: Path) -> tuple[dict[str, Path], list[str]]:
    """(regular files by relative path, symlinks) under ``bundle``, walked without following links: a bundle
    holds plain files only (``build`` writes no link), so every link, to a file or a folder, inside or outside
    the bundle, identical content or not, is a difference (the files a linked folder shows are not counted as
    the bundle's)."""
    import os

    files: dict[str, Path] = {}
    links: list[str] = []
    for dirpath, dirnames, filenames in os.walk(bundle, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(bundle)
        if rel_dir.parts and rel_dir.parts[0] in RUNTIME_OUTPUTS:
            dirnames[:] = []
            continue
        for name in list(dirnames):
            if not rel_dir.parts and name in RUNTIME_OUTPUTS:
                dirnames.remove(name)  # what the bundle's scripts write (a link to scratch space too)
            elif (here / name).is_symlink():
                links.append((rel_dir / name).as_posix())
                dirnames.remove(name)
        for name in filenames:
            p = here / name
            rel = (rel_dir / name).as_posix()
            if rel == MANIFEST or (not rel_dir.parts and name in RUNTIME_OUTPUTS):
                continue
            if p.is_symlink():
                links.append(rel)
            elif p.is_file():
                files[rel] = p
    return files, sorted(links)


def check_matches_manifest(bundle: Path) -> None:
    """The bundle's files are the ones its manifest hashed (an edited options file, an extra or linked file:
    refused, naming the first difference)."""
    res = verify_bundle(bundle)  # no folder, no or unreadable manifest: a UserError naming it
    if not res["ok"]:
        first = next((f"{k.rstrip('s')}: {res[k][0]}" for k in ("changed", "missing", "extra", "symlinks", "recipe")
                      if res[k]), "")
        raise UserError(f"bundle {bundle} does not match its manifest ({first}; 'trtllm-spec verify {bundle}' lists "
                        "all): it would mix the bundle with edits it was not built with; rebuild the bundle "
                        "or restore the file")


def read_bundle(bundle: Path, what: str = "--bundle") -> Bundle:
    """The bundle at ``bundle``, verified against its manifest, as one record (UserError naming the first
    problem: not a folder, no manifest, a file changed, manifest and files disagreeing)."""
    from trtllm_spec.core import releases
    from trtllm_spec.core.files import read_structured

    if not bundle.is_dir():
        raise UserError(f"{what} {bundle} is not a folder; give the output folder of 'trtllm-spec build'")
    check_matches_manifest(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    where = f"bundle {bundle}"
    profile = manifest.get("trtllm_profile")
    drafter = (manifest.get("drafter") or {}).get("type") if isinstance(manifest.get("drafter"), dict) else None
    if not isinstance(profile, str) or not isinstance(drafter, str):
        raise UserError(f"{where}: {MANIFEST} lacks trtllm_profile or drafter.type; rebuild it with 'trtllm-spec build'")
    releases.get(profile, f"{where}: {MANIFEST} trtllm_profile")

    def mapping(name: str, kind: str) -> dict | None:
        path = bundle / name
        if not path.is_file():
            return None
        data = read_structured(path, kind, UserError)
        if not isinstance(data, dict):
            raise UserError(f"{path} must hold a mapping of {kind}; rebuild the bundle")
        return data

    recipe = mapping(RECIPE_FILE, "bundle recipe")
    if recipe is None:
        raise UserError(f"{where} has no {RECIPE_FILE}; give the output folder of 'trtllm-spec build'")
    options = {name: data for name in OPTIONS_FILES if (data := mapping(name, "LLM API options")) is not None}
    if OPTIONS_FILE not in options:
        raise UserError(f"{where} has no {OPTIONS_FILE}; give the output folder of 'trtllm-spec build'")
    record = Bundle(path=bundle, profile=profile, drafter=drafter, manifest=manifest, recipe=recipe,
                    options=options, dataset=bundle / DATASET_FILE if (bundle / DATASET_FILE).is_file() else None)
    _check_agreement(record)
    return record


def bundle_in_build(bundle: Path, profile: str, drafter: str, recipe: dict) -> Bundle:
    """The record of a bundle still being built (its manifest is written last): the build's own facts, and the
    options files already written into it (the trtllm stage measures them on a GPU node)."""
    from trtllm_spec.core.files import read_structured

    options = {name: read_structured(bundle / name, "LLM API options", UserError) for name in OPTIONS_FILES
               if (bundle / name).is_file()}
    return Bundle(path=bundle, profile=profile, drafter=drafter, manifest={}, recipe=recipe, options=options,
                  dataset=bundle / DATASET_FILE if (bundle / DATASET_FILE).is_file() else None)


def _check_agreement(b: Bundle) -> None:
    """The manifest's profile and drafter are what the resolved recipe resolves to and what the options run."""
    from trtllm_spec.core import releases
    from trtllm_spec.core.recipe import RecipeError
    from trtllm_spec.core.recipe_load import recipe_from_dict

    def disagree(field_: str, said: str, found: str, where: str) -> UserError:
        return UserError(f"bundle {b.path}: {MANIFEST} says {field_} {said!r} but {where} says {found!r}: the manifest "
                         "and the files come from different builds; rebuild the bundle with 'trtllm-spec build'")

    try:
        recipe = recipe_from_dict(b.recipe, str(b.path / RECIPE_FILE))
    except RecipeError as exc:
        raise UserError(f"bundle {b.path}: {RECIPE_FILE} no longer validates ({str(exc).splitlines()[0]}); rebuild "
                        "the bundle with this trtllm-spec") from None
    if recipe.drafter.type != b.drafter:
        raise disagree("drafter.type", b.drafter, recipe.drafter.type, RECIPE_FILE)
    if recipe.engine.trtllm_version != "auto":
        if recipe.trtllm_profile != b.profile:
            raise disagree("trtllm_profile", b.profile, recipe.trtllm_profile, RECIPE_FILE)
    elif releases.order(b.profile) < releases.order(recipe.drafter.required_trtllm()):
        # 'auto' resolves by the rule of the trtllm-spec that built the bundle (it changed once: the drafter's
        # first release, then the newest stable one): any release that runs the section is a truthful record
        raise disagree("trtllm_profile", b.profile, f"a drafter section that needs TensorRT-LLM "
                       f"{recipe.drafter.required_trtllm()}+", RECIPE_FILE)
    import re

    for name in b.options:  # each options file names the release it was rendered for in its first line
        first = (b.path / name).read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        said = re.match(r"# TensorRT-LLM (\S+) LLM API options", first)
        if said and said.group(1) != b.profile:
            raise disagree("trtllm_profile", b.profile, said.group(1), f"{name} (its header)")
    for name, options in b.options.items():
        spec = options.get("speculative_config")
        if not isinstance(spec, dict):
            continue
        tag = spec.get("decoding_type")
        # the manifest's drafter type tells apart the mechanisms that share a tag (DFlash's is DFlash2's too)
        if not isinstance(tag, str) or b.drafter not in releases.tag_types(tag):
            raise disagree("drafter.type", b.drafter, f"decoding_type {tag!r}", name)
        known = releases.DECODING_TAGS.get(tag)
        if known is None or not releases.knows(b.profile, known):
            raise disagree("trtllm_profile", b.profile, f"decoding_type {tag!r} (not in TensorRT-LLM {b.profile})",
                           name)
