"""vLLM, the third engine and the first batching server: ``measure vllm`` (its own speculative decoding of a
drafter beside our reference decoder on the same prompts) and ``assets serve --engine vllm`` (the OpenAI-compatible
server with a drafter, until Ctrl-C / SIGTERM). The server is ``serve/vllm.VllmServer``; which vLLM method runs a
drafter is the descriptor's (``Mechanism.vllm_method``, ``vllm_options``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtllm_spec.errors import UserError


def vllm_spec(drafter: str, draft_len: int, drafter_options: dict | None = None, *, kind: str | None = None):
    """The ``serve.vllm.VllmSpec`` that runs ``drafter`` (a folder, or a folderless mechanism's name) at D; a
    mechanism vLLM cannot run is refused with the descriptor's reason and the list of those it runs."""
    from trtllm_spec.drafters.registry import MECHANISMS, folderless, get
    from trtllm_spec.serve.vllm import VllmSpec

    if kind is None:
        if drafter in folderless():
            kind = drafter
        else:
            from trtllm_spec.stages.llamacpp import drafter_type_of

            kind = drafter_type_of(Path(drafter))
    mech = get(kind)
    if mech.vllm_method is None:
        runs = sorted(n for n, m in MECHANISMS.items() if m.vllm_method)
        raise UserError(f"a {kind} drafter cannot run on vLLM: {mech.vllm_refusal}; vLLM runs these of our drafter "
                        f"types: {', '.join(runs)}")
    if draft_len < 1:
        raise UserError(f"--draft-len {draft_len}: vLLM needs D >= 1 drafts per step")
    if drafter_options and not mech.folderless:  # an exported folder's only flag is TensorRT-LLM's SA enhancer
        raise UserError(f"--sa-enhancer-threshold / --global-pool: TensorRT-LLM's suffix-automaton enhancer "
                        f"(sa_config) has no vLLM counterpart; measure the {kind} drafter on vLLM without them, or "
                        "with them on 'measure reference'")
    options = drafter_options
    if options is None and mech.folderless:
        options = mech.runtime_options(mech.default_config()) or {}
    return VllmSpec(mech.vllm_method, draft_len, None if mech.folderless else Path(drafter).resolve(),
                    mech.vllm_options(options or {}))


def run_measure_vllm(target: str, drafter: str, draft_len: int, *, out: Path | None, force: bool,
                     compare_reference: bool = True, suite: str, categories, num_prompts: int, max_new_tokens: int,
                     temperature: float, seed: int, chat_template: Path | None = None,
                     training_data: Path | None = None, allow_overlap: bool = False, drafter_options: dict | None = None,
                     allow_long: bool = False, progress: Callable[[str], None] | None = None,
                     request_mode=None) -> dict:
    """``trtllm-spec measure vllm``: vLLM's speculative decoding of ``drafter`` over the suite and (with
    ``compare_reference``) our reference decoder on the same prompts beside it; the profile (``engine: vllm``,
    with ``comparison``), report.md and provenance written to ``out`` atomically."""
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.data.user_suite import measure_budget, select_suite, suite_checker
    from trtllm_spec.measure.run import check_settings, inspect_drafter, target_checkpoint, target_summary
    from trtllm_spec.serve.vllm import find_vllm
    from trtllm_spec.stages.measure import _input_files, write_profile

    log = progress or (lambda _m: None)
    check_settings(draft_len, max_new_tokens, temperature, "fp32")
    target_dir, target_cfg = target_checkpoint(target)
    info = inspect_drafter(drafter, target_cfg, draft_len)
    spec = vllm_spec(drafter, draft_len, drafter_options, kind=info.kind)
    install = find_vllm()  # a missing venv is one line before anything runs
    check = suite_checker(suite, training_data, allow_overlap, log)
    inputs_paths = (target_dir, *((Path(drafter),) if info.path else ()))
    if out is not None:
        check_output_dir(out, force, inputs_paths)
    settings = dict(suite=suite, categories=categories, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                    temperature=temperature, seed=seed, chat_template=chat_template)
    items, _ = select_suite(suite, categories, num_prompts, seed)
    runs = 4 if compare_reference else 2
    measure_budget(len(items) * runs, max_new_tokens, f"{len(items)} prompts x {runs} decodes (vLLM"
                   + (" and ours" if compare_reference else "") + ": speculative and target alone)", allow_long, log)
    import shutil
    import tempfile

    from trtllm_spec.measure.vllm_engine import measure_vllm

    vllm_runs: list = []
    log_dir = Path(tempfile.mkdtemp(prefix="trtllm-spec-vllm-logs-"))  # kept when vLLM fails (named in the error)
    try:
        profile = measure_vllm(
            target_dir, spec, draft_len,
            drafter={"type": info.kind, "path": str(info.path.resolve()) if info.path else None,
                     "max_draft_len": info.max_draft_len},
            target=target_summary(target, target_dir, target_cfg), progress=log, suite_check=check,
            runs_out=vllm_runs, request_mode=request_mode, install=install, log_dir=log_dir, **settings)
    except UserError as exc:  # vLLM died or refused mid-run: the prompts it measured are kept beside --out
        raise UserError(f"{exc}{_keep_partial(vllm_runs, out, len(items))} (vLLM's logs: {log_dir})") from None
    except BaseException:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    shutil.rmtree(log_dir, ignore_errors=True)
    if compare_reference:
        from trtllm_spec.measure.engine_compare import compare
        from trtllm_spec.measure.run import measure

        log("reference decoder: the same prompts on our PyTorch decoder")
        ref_runs: list = []
        ref = measure(target_dir, drafter, draft_len, dtype="fp32", device="cpu", progress=log, runs_out=ref_runs,
                      request_mode=request_mode, drafter_options=drafter_options, **settings)
        profile["comparison"] = compare(vllm_runs, ref_runs, draft_len, {
            "engine": "pytorch", "mean_acceptance_length": ref["overall"]["mean_acceptance_length"],
            "dtype": ref["settings"]["dtype"], "machine": ref["settings"]["machine"]}, engine="vllm")
    if out is not None:
        args = {"target": target, "drafter": drafter, "draft_len": draft_len, "engine": "vllm",
                "compare_reference": compare_reference, **{
                    k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items()},
                "training_data": str(training_data) if training_data else None, "allow_overlap": allow_overlap,
                "drafter_options": drafter_options,
                "request_mode": request_mode.as_dict() if request_mode is not None else None}
        write_profile(profile, out, force, {"measure": args}, _input_files(target_dir, str(info.path or "")),
                      inputs_paths)
    return profile


def parse_schedule(text: str, draft_len: int | None, max_num_seqs: int, release: str | None = None
                   ) -> list[tuple[int, int, int]]:
    """``--draft-len-schedule JSON``: a TensorRT-LLM ``draft_len_schedule`` (keys read by ``release``'s rule,
    default: what ``auto`` resolves to) as vLLM's ``num_speculative_tokens_per_batch_size`` over 1..max_num_seqs
    (``planner.schedule.vllm_schedule``); its largest D must be ``draft_len``."""
    import json

    from trtllm_spec.core.releases import default_release
    from trtllm_spec.planner.schedule import vllm_schedule

    release = release or default_release()
    try:
        raw = json.loads(text)
        sched = {int(k): int(v) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError):
        raise UserError(f"--draft-len-schedule {text!r}: give a JSON object of batch size -> D, e.g. "
                        "'{\"4\": 3, \"16\": 1}'") from None
    if not sched or draft_len is None or max(sched.values()) != draft_len:
        raise UserError(f"--draft-len-schedule {text}: its largest D must be --draft-len ({draft_len}), the drafts "
                        "vLLM is started with")
    return vllm_schedule(sched, draft_len, release, max_num_seqs)


def _keep_partial(runs: list, out: Path | None, total: int) -> str:
    """The prompts measured before a failure, as ``<out>.partial.json`` (never inside --out: nothing half-written
    there); the message's tail naming it."""
    if not runs or out is None:
        return f" ({len(runs)} of {total} prompts measured, not kept: give --out to keep them)" if runs else ""

    from trtllm_spec.core.files import write_json_atomic

    path = Path(out).parent / f"{Path(out).name}.partial.json"
    write_json_atomic(path, {"engine": "vllm", "complete": False, "measured": len(runs), "of": total, "prompts": [
        {"id": r.id, "category": r.category, "output": r.output, "reference": r.reference,
         "accepted": r.accepted, "proposed": r.proposed} for r in runs]})
    return f"; the {len(runs)} of {total} prompts measured before are kept in {path}"


def vllm_server(asset: str, drafter: str | None, draft_len: int | None, *, host: str, port: int,
                max_num_seqs: int, ctx: int, drafter_options: dict | None = None, cache: Path | None = None,
                log_file: Path | None = None, per_batch_size: list[tuple[int, int, int]] | None = None,
                log: Callable[[str], None] = lambda _m: None):
    """``assets serve NAME --engine vllm``: vLLM over the asset's fp32 HF folder, with ``drafter`` at D when given
    and ``per_batch_size`` as its batch-size schedule (not started: a ``VllmServer`` to use as a context
    manager)."""
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.drafters.registry import folderless
    from trtllm_spec.serve.vllm import VllmServer, find_vllm

    install = find_vllm()
    spec = None
    if drafter is not None:
        if draft_len is None:
            raise UserError("--drafter needs --draft-len D")
        if drafter not in folderless() and not Path(drafter).is_dir():
            raise UserError(f"--drafter {drafter}: not a folder; give an exported drafter folder or one of "
                            f"{', '.join(folderless())}")
        spec = vllm_spec(drafter, draft_len, drafter_options)
        if per_batch_size is not None:
            from dataclasses import replace

            spec = replace(spec, options={**spec.options,
                                          "num_speculative_tokens_per_batch_size": [list(r) for r in per_batch_size]})
    target_dir = fetch_model(asset, "fp32", cache, log=log)
    server = VllmServer(target_dir, spec=spec, install=install, host=host, port=port, max_num_seqs=max_num_seqs,
                        max_model_len=ctx, served_name=asset, log_file=log_file)
    return server
