"""trtllm-bench reports as step-time measurements for ``plan --calibrate`` / ``replan --calibrate``.

A report (``trtllm-bench ... --streaming --report_json F``; NVIDIA/TensorRT-LLM
``tensorrt_llm/bench/dataclasses/reporting.py`` @0249976, ``ReportUtility.get_statistics_dict``) holds:
``engine.{model, version}``, ``world_info.{tp_size, pp_size, world_size, max_batch_size, kv_cache_percentage}``,
``request_info.{avg_num_concurrent_requests, avg_input_length, avg_output_length}``,
``streaming_metrics.avg_tpot_ms`` (the mean over requests of (last - first token time) / (output tokens - 1),
``RequestRecord.intertoken_latency`` in ``statistics.py``: generation time per token after the first) and, when
the run speculated, ``decoding_stats`` (engine_reports.py reads D and AL from it). One generation iteration then
takes TPOT x AL (AL = 1 without speculation).

``check_report`` refuses a report that does not belong to what is calibrated (another model, GPU count, release
or options file), naming the mismatch; it is kept apart from the replan stage's other input checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.releases import tag_types
from trtllm_spec.core.targets import TargetIdentity
from trtllm_spec.errors import UserError
from trtllm_spec.measure.engine_reports import bench_section, drafts_per_iteration, read_bench_report
from trtllm_spec.planner.calibrate import StepMeasurement


@dataclass(frozen=True)
class RunOptions:
    """What an options file fixes that a report shows (``world_info``, ``decoding_stats``)."""

    file: str
    max_batch_size: int | None
    free_gpu_memory_fraction: float | None
    max_draft_len: int | None = None  # None: any D (a recipe, not a bundle)
    draft_len_schedule: dict[int, int] | None = None
    report_dir: str | None = None  # the folder its bench script writes reports to (bench_calibrate.sh's two)


@dataclass(frozen=True)
class RunExpectation:
    """What reports must show to belong to the bundle (or recipe) being calibrated."""

    where: str  # "bundle B" / "recipe R"
    model_ids: tuple[str, ...]
    world_size: int
    release: str  # TensorRT-LLM profile, e.g. "1.2"
    drafter_type: str
    plain: RunOptions
    speculative: RunOptions
    # further speculative options files of the bundle at other draft lengths (llm_api_options.calibrate.yaml)
    other_speculative: tuple[RunOptions, ...] = ()
    # what the target resolves to (core.targets.target_identity): served runs are compared on it, not on names
    identity: TargetIdentity | None = None

    def speculative_for(self, draft_len: int, path: Path | None = None) -> RunOptions:
        """The speculative options file that runs ``draft_len``: a further file whose bench script writes to the
        report's folder, else the main one where it runs that D (or sets none), else a further one that does. A
        report does not name its options file, so two files at one D (the bundle's own and the same without its
        draft_len_schedule) are told apart by the folder their script writes to."""
        same = [o for o in self.other_speculative if o.max_draft_len == draft_len]
        if path is not None:
            here = next((o for o in same if o.report_dir and Path(path).parent.name == o.report_dir), None)
            if here is not None:
                return here
        if self.speculative.max_draft_len in (None, draft_len) or not same:
            return self.speculative
        return same[0]

    def speculative_files(self) -> str:
        return " or ".join(o.file for o in (self.speculative, *self.other_speculative))


def options_of(file: str, options: dict, report_dir: str | None = None) -> RunOptions:
    """The report-visible settings of a bundle's LLM API options file."""
    spec = options.get("speculative_config") or {}
    d = spec.get("max_draft_len") or spec.get("num_nextn_predict_layers")
    sched = spec.get("draft_len_schedule")
    return RunOptions(file, options.get("max_batch_size"),
                      (options.get("kv_cache_config") or {}).get("free_gpu_memory_fraction"), d,
                      {int(k): int(v) for k, v in sched.items()} if sched else None, report_dir)


def _norm(name: object) -> str:
    return str(name or "").strip().rstrip("/").lower()


def _num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def read_run_report(path: Path) -> dict:
    from trtllm_spec.core.files import read_structured

    data = read_structured(path, "trtllm-bench report", UserError)
    where = f"trtllm-bench report {path}"
    if not isinstance(data, dict) or not isinstance(data.get("engine"), dict):
        raise UserError(f"{where} is not a trtllm-bench --report_json file (no 'engine' object); benchmark with the "
                        "bundle's bench scripts")
    missing = [f"{sec}.{k}" for sec, keys in (("request_info", ("avg_num_concurrent_requests", "avg_input_length",
                                                                 "avg_output_length")),
                                              ("streaming_metrics", ("avg_tpot_ms",)))
               for k in keys if not _num((data.get(sec) or {}).get(k))]
    if missing:
        raise UserError(f"{where} lacks {', '.join(missing)}: calibration needs the streaming TPOT; run trtllm-bench "
                        "with --streaming (the bundle's bench scripts do)")
    return data


def _release(version: object) -> str:
    parts = str(version or "").split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else str(version)


def check_report(report: dict, exp: RunExpectation, path: Path) -> RunOptions:
    """The options the report must have run (plain or speculative); UserError naming any mismatch."""
    where = f"trtllm-bench report {path}"
    eng, world = report["engine"], report.get("world_info") or {}
    if _norm(eng.get("model")) not in {_norm(m) for m in exp.model_ids}:
        raise UserError(f"{where} ran model {eng.get('model')!r}; the {exp.where} serves "
                        f"{' / '.join(repr(m) for m in exp.model_ids)}: another model's report cannot calibrate it")
    size = world.get("world_size") or (world.get("tp_size") or 1) * (world.get("pp_size") or 1)
    if size != exp.world_size:
        raise UserError(f"{where} ran on {size} GPU(s) (world_info.world_size); the {exp.where} runs on "
                        f"{exp.world_size} (tp x pp): bench it with the bundle's options")
    if _release(eng.get("version")) != exp.release:
        raise UserError(f"{where} ran TensorRT-LLM {eng.get('version')}; the {exp.where} plans for {exp.release} "
                        "(engine.trtllm_version): host costs differ between releases; bench with that release")
    opts = exp.plain
    if "decoding_stats" in report:
        d = drafts_per_iteration(report)
        opts = exp.speculative_for(round(d), path) if d is not None else exp.speculative
    _check_options(report, opts, where)
    return opts


def _check_options(report: dict, opts: RunOptions, where: str) -> None:
    world = report.get("world_info") or {}
    kind = "speculative" if opts.max_draft_len is not None or "decoding_stats" in report else "plain"
    for key, want, got in (("max_batch_size", opts.max_batch_size, world.get("max_batch_size")),
                           ("kv_cache_percentage", opts.free_gpu_memory_fraction, world.get("kv_cache_percentage"))):
        if want is not None and got is not None and abs(float(got) - float(want)) > 1e-6:
            raise UserError(f"{where}: world_info.{key} = {got}, but the {kind} run's options ({opts.file}) set "
                            f"{want}: the report comes from another options file")


def measurement(report: dict, exp: RunExpectation, path: Path) -> StepMeasurement:
    """One report as a step-time measurement, after ``check_report``."""
    where = f"trtllm-bench report {path}"
    opts = check_report(report, exp, path)
    req = report["request_info"]
    batch = max(1, round(req["avg_num_concurrent_requests"]))
    d, al = 0, 1.0
    if "decoding_stats" in report:
        checked = read_bench_report(path)
        mode = checked["decoding_stats"].get("mode")
        # the expectation's drafter type tells apart the mechanisms that share a mode (DFlash's)
        if exp.drafter_type not in (tag_types(mode) if isinstance(mode, str) else (mode,)):
            raise UserError(f"{where} ran decoding mode {mode!r}; the {exp.where}'s drafter is {exp.drafter_type}: "
                            "the report comes from another options file")
        section, d = bench_section(checked, where)
        al = section["mean_acceptance_length"]
        _check_draft_len(d, batch, opts, exp.release, where)
    return StepMeasurement(batch=batch, draft_len=d, acceptance_length=al, isl=round(req["avg_input_length"]),
                           osl=max(1, round(req["avg_output_length"])),
                           tpot_s=report["streaming_metrics"]["avg_tpot_ms"] * 1e-3, source=str(path))


def _check_draft_len(d: int, batch: int, opts: RunOptions, release: str, where: str) -> None:
    if opts.max_draft_len is not None and d != opts.max_draft_len:
        raise UserError(f"{where} ran max_draft_len {d}; {opts.file} sets {opts.max_draft_len}: the report comes "
                        "from another options file")
    if opts.draft_len_schedule:
        from trtllm_spec.planner.schedule import draft_len_at

        ran = draft_len_at(opts.draft_len_schedule, d, release, batch)
        if ran != d:
            raise UserError(f"{where} ran at concurrency {batch}, where {opts.file}'s draft_len_schedule gives D = "
                            f"{ran}, not {d}: its TPOT mixes draft lengths; calibrate with report_c1.json")


def read_measurements(paths: list[Path], exp: RunExpectation) -> tuple[list[StepMeasurement], list[dict]]:
    """(measurements, provenance of each file); at least one plain and one speculative report, same GPU."""
    from trtllm_spec.core.files import sha256_file

    if not paths:
        raise UserError("--calibrate needs trtllm-bench reports: a plain run and a speculative run of the same "
                        "bundle (bench_results*/report_c1.json)")
    reports = [(p, read_run_report(p)) for p in paths]
    out = [measurement(r, exp, p) for p, r in reports]
    kinds = {"plain": [m for m in out if m.draft_len == 0], "speculative": [m for m in out if m.draft_len]}
    for kind, ms in kinds.items():
        if not ms:
            raise UserError(f"--calibrate got no {kind} report ({', '.join(map(str, paths))}): give a plain run "
                            f"({exp.plain.file}) and a speculative run ({exp.speculative_files()}) of the same "
                            "bundle")
    gpus = {str((r.get("machine") or {}).get("name")) for _p, r in reports if (r.get("machine") or {}).get("name")}
    if len(gpus) > 1:
        raise UserError(f"--calibrate reports ran on different GPUs ({', '.join(sorted(gpus))}); give runs of one "
                        "machine")
    files = [{"file": str(p.resolve()), "sha256": sha256_file(p), "trtllm_version": r["engine"].get("version"),
              "machine": (r.get("machine") or {}).get("name")} for p, r in reports]
    return out, files
