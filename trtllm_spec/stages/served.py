"""``trtllm-spec measure served``: a served OpenAI-compatible endpoint measured over the suite at each
concurrency (measure/served.py), with the planner's prediction for the same batch sizes beside it.

Steps: check the arguments -> the recipe the prediction plans (``--recipe``, else the target with the planner's
defaults; ``--gpu`` replaces its hardware, e.g. with a 'hw probe' file of the server's machine) -> the prediction
(before anything is sent) -> suite and overlap check -> the target's tokenizer -> the server's checks
(data/openai_http.check_server) -> measure -> served_measurement.json, report.md and provenance.json, atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trtllm_spec.core.artifacts import SERVED_FILE
from trtllm_spec.core.recipe import DEFAULT_DRAFTER, Recipe
from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError


def served_recipe(recipe_file: Path | None, target: str | None, gpu: str | None, levels: Sequence[int]) -> Recipe:
    """The recipe the prediction plans: its workload's batch sizes are the measured concurrencies."""
    from trtllm_spec.core.recipe_load import load_recipe, recipe_from_dict, recipe_to_dict, set_path

    if recipe_file is None and target is None:
        raise UserError("'measure served' needs --target (the checkpoint folder or fetched asset the server serves: "
                        "its tokenizer checks the server) or --recipe FILE (its target)")
    base = recipe_to_dict(load_recipe(recipe_file)) if recipe_file is not None else \
        {"name": "served", "target": {"model": target}, "drafter": {"type": DEFAULT_DRAFTER}}
    if target is not None:
        set_path(base, ["target", "model"], str(Path(target).resolve()) if Path(target).exists() else target,
                 "--target")
    if gpu is not None:
        set_path(base, ["hardware", "gpu"], str(Path(gpu).resolve()) if Path(gpu).exists() else gpu, "--gpu")
    set_path(base, ["workload", "batch_sizes"], list(levels), "--concurrency")
    recipe = recipe_from_dict(base, str(recipe_file or "measure served"))
    if recipe_file is not None:
        recipe._base_dir = recipe_file.resolve().parent
    return recipe


def prediction(recipe: Recipe, recipe_file: Path | None, gpu: str | None) -> dict:
    """The planner's per-batch prediction for ``recipe``'s hardware, labelled with what it is."""
    from trtllm_spec.stages.plan import compute_plan

    plan, _ = compute_plan(recipe)
    hw, drafter = plan.hardware, plan.drafter
    origin = ("--gpu" if gpu is not None else f"the recipe {recipe_file.name}" if recipe_file is not None
              else "the planner's default hardware")
    probed = hw.get("probe") is not None
    where = f"{hw['name']} ({hw['kind'].upper()}{', a hw probe file' if probed else ''}, from {origin})"
    comparable = ("comparable to a server on the probed machine" if probed else
                  f"not comparable to a server on other hardware (a CPU llama.cpp server is not a {hw['name']})")
    acc = drafter["acceptance"]
    label = (f"the planner's prediction for {where}, {drafter['type']} with "
             f"{'measured' if acc.get('measured') else 'assumed'} acceptance, TensorRT-LLM serving; {comparable}")
    rows = [{"batch_size": r["batch_size"], "draft_len": r["draft_len"], "tpot_ms": r["tpot_s"] * 1e3,
             "tpot_no_spec_ms": r["tpot_s"] * r["speedup"] * 1e3,  # speedup = tok/s/user at D over D = 0
             "tokens_per_s_per_user": r["tokens_per_s_per_user"], "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
             "speedup": r["speedup"], "acceptance_length": r["acceptance_length"]}
            for r in plan.recommendation.by_batch]
    return {"label": label, "hardware": {k: hw.get(k) for k in ("name", "kind", "description")},
            "mechanism": drafter["type"], "acceptance_source": acc.get("source"),
            "recipe": str(recipe_file) if recipe_file else None, "by_batch": rows,
            "infeasible_batch_sizes": plan.recommendation.infeasible_batch_sizes}


def _tokenizer_folder(recipe: Recipe) -> tuple[Path, dict]:
    from trtllm_spec.core.targets import resolve_target

    t = resolve_target(recipe.target.model, recipe.base_dir)
    if t.path is None or not t.path.is_dir():
        raise UserError(f"'measure served' checks the server against the target's tokenizer, but "
                        f"{recipe.target.model!r} is a shape preset or a lone config.json; give the checkpoint folder "
                        "(or fetched asset) the server serves with --target")
    return t.path, t.config


def run_served(*, server_url: str, server_model: str | None, concurrency: str, target: str | None,
               recipe_file: Path | None, gpu: str | None, suite: str, categories: Sequence[str] | None,
               num_prompts: int, max_new_tokens: int, temperature: float, seed: int, chat_template: Path | None,
               training_data: Path | None, allow_overlap: bool, timeout_s: float, out: Path | None, force: bool,
               progress: Callable[[str], None] | None = None, allow_long: bool = False, request_mode=None,
               serves: tuple[str | None, int | None] = (None, None)) -> dict:
    from trtllm_spec.core.artifacts import ServedMeasurement
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.core.targets import config_sha256
    from trtllm_spec.data.openai_http import base_url, check_server
    from trtllm_spec.data.user_suite import check_context, measure_budget, select_suite, suite_checker
    from trtllm_spec.measure.run import check_settings
    from trtllm_spec.measure.served import check_served_model, measure_served, parse_concurrency

    levels = parse_concurrency(concurrency)
    declared = check_serves(*serves)
    url = base_url(server_url)
    check_settings(1, max_new_tokens, temperature, "fp32")
    if not timeout_s > 0:
        raise UserError(f"--request-timeout {timeout_s}: must be > 0 seconds")
    recipe = served_recipe(recipe_file, target, gpu, levels)
    from trtllm_spec.core.request_mode import RequestMode, recipe_mode
    from trtllm_spec.measure.run import resolve_mode

    mode = resolve_mode(request_mode, temperature)
    if recipe_file is not None and mode == RequestMode(temperature=mode.temperature):
        mode = resolve_mode(recipe_mode(recipe), temperature)  # the recipe's mode unless flags give one
    temperature = mode.temperature
    folder, cfg = _tokenizer_folder(recipe)
    check = suite_checker(suite, training_data, allow_overlap, progress or print)
    if out is not None:
        check_output_dir(out, force, (folder,))
    pred = prediction(recipe, recipe_file, gpu)
    items, suite_prov = select_suite(suite, categories, num_prompts, seed)
    requests = sum(max(len(items), c) for c in levels)
    measure_budget(requests, max_new_tokens, f"{len(items)} prompts at concurrency {','.join(map(str, levels))}",
                   allow_long, progress or print)  # printed, and refused above the limit, before anything is sent
    overlap = check(items) if check else None
    from trtllm_spec.data.chat import check_template_kwargs, load_tokenizer, prompt_ids

    tok = load_tokenizer(folder, chat_template)
    check_template_kwargs(tok, mode.chat_template_kwargs)
    from trtllm_spec.measure.run import item_mode, mode_items

    items, suite_prov = mode_items(items, tok, categories, suite_prov)
    prompts = [prompt_ids(tok, it.messages, item_mode(mode, it).chat_template_kwargs) for it in items]
    check_context(items, prompts, max_new_tokens, cfg.get("max_position_embeddings"))
    prompt_lens = [len(p) for p in prompts]
    checked = check_server(url, tok, server_model, timeout_s, "--server-model")
    model = checked.model
    check_served_model(url, model, checked.token_checked, server_model is not None,
                       [recipe.target.model, folder.name, folder.parent.name, str(cfg.get("_name_or_path") or "")])
    if checked.note and progress:
        progress(f"warning: server {url}: {checked.note}")
    measured = measure_served(url, model, items, levels, max_tokens=max_new_tokens, temperature=temperature,
                              seed=seed, timeout=timeout_s, progress=progress, request_mode=mode,
                              count_tokens=lambda text: len(tok(text, add_special_tokens=False).input_ids))
    if declared is not None:
        declared["checked"] = check_serves_reports(declared, measured, url)
    data = ServedMeasurement.build(
        engine="openai",
        server={"url": url, "model": model, "checks": checked.checks, "serves_target_checked": checked.token_checked,
                **({"unchecked": checked.note} if checked.note else {}),
                **({"owned_by": checked.owned_by} if checked.owned_by else {}),
                **({"serves": declared} if declared is not None else {})},
        target={"spec": recipe.target.model, "path": str(folder), "config_sha256": config_sha256(cfg)},
        suite={**suite_prov, "name": suite if suite == SUITE_NAME else Path(suite).name, "seed": seed,
               "num_prompts_per_category": num_prompts, "item_ids": [it.id for it in items],
               "prompt_tokens_mean": round(sum(prompt_lens) / len(prompt_lens), 2) if prompt_lens else None,
               **({"overlap": overlap} if overlap else {})},
        settings={"max_tokens": max_new_tokens, "temperature": temperature, "seed": seed,
                  "concurrency": levels, "request_timeout_s": timeout_s, "stream": True,
                  "request_mode": mode.as_dict()},
        levels=measured, prediction=pred)
    if out is not None:
        _write(data, out, force, folder, recipe_file, {
            "server_url": url, "server_model": server_model, "concurrency": levels, "target": target,
            "recipe": str(recipe_file) if recipe_file else None, "gpu": gpu, "suite": suite,
            "categories": list(categories) if categories else None, "num_prompts": num_prompts,
            "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed,
            "chat_template": str(chat_template) if chat_template else None, "request_timeout_s": timeout_s,
            "training_data": str(training_data) if training_data else None, "allow_overlap": allow_overlap,
            "request_mode": mode.as_dict(), "serves_drafter": serves[0], "serves_draft_len": serves[1]})
    return data


def check_serves(drafter: str | None, draft_len: int | None) -> dict | None:
    """``--serves-drafter`` / ``--serves-draft-len``: what the server was started with, as a record (None: not
    said); a contradiction is refused before anything is sent."""
    if drafter is None and draft_len is None:
        return None
    if draft_len is None:
        raise UserError(f"--serves-drafter {drafter}: give --serves-draft-len D too (the draft length the server "
                        "runs)")
    if draft_len < 0:
        raise UserError(f"--serves-draft-len {draft_len}: a draft length is >= 0 (0: the target alone)")
    if draft_len == 0 and drafter is not None:
        raise UserError(f"--serves-drafter {drafter} with --serves-draft-len 0: a server that runs the target alone "
                        "drafts with nothing; drop --serves-drafter")
    if draft_len > 0:
        from trtllm_spec.drafters.registry import MECHANISMS

        if drafter is None:
            raise UserError(f"--serves-draft-len {draft_len}: name what the server drafts with (--serves-drafter "
                            f"TYPE: {', '.join(MECHANISMS)})")
        if drafter not in MECHANISMS:
            raise UserError(f"--serves-drafter {drafter!r} is not a drafter type; valid: {', '.join(MECHANISMS)}")
    return {"drafter": drafter, "draft_len": draft_len}


PER_REQUEST_FIELDS = ("metrics.speculative_decoding", "choices[0].speculative_decoding(_stats)", "timings.draft_n")


def _draft_reports(lv: dict) -> tuple[list[dict], list[str]]:
    """What each source of one level says about drafting ({source, steps, tokens, per_step, at}: the engine's own
    counters, /metrics or iteration stats; the responses' per-request blocks or timings), and why each source that
    says nothing could not be read."""
    acc, per = lv.get("server_acceptance") or {}, lv.get("per_request_acceptance") or {}
    said, silent = [], []
    if acc.get("reported"):
        steps = acc.get("num_drafts", acc.get("num_requests_with_draft_tokens"))
        tokens = acc.get("num_draft_tokens")
        said.append({"source": acc.get("source"), "steps": steps, "tokens": tokens, "at": None,
                     "per_step": tokens / steps if steps and tokens is not None else None})
    else:
        silent.append(f"the engine's counters ({acc.get('why') or acc.get('note') or 'not reported'})")
    drafts = per.get("draft_counts")
    if drafts:
        steps, tokens = drafts.get("num_spec_steps"), drafts.get("num_draft_tokens")
        said.append({"source": drafts.get("source"), "steps": steps, "tokens": tokens,
                     "per_step": drafts.get("max_draft_tokens_per_step"), "at": drafts.get("max_at")})
    else:
        silent.append("the per-request blocks (no response carried one: "
                      + "; ".join(PER_REQUEST_FIELDS) + ")")
    return said, silent


def check_serves_reports(declared: dict, levels: Sequence[dict], url: str) -> str:
    """The declared D checked against every source of every level that counts drafts (the engine's /metrics
    counters or iteration stats, and the responses' per-request blocks, in one check): a server that drafted while
    said to run the target alone, or drafted more than D tokens per step (for blocks: in any one response), is
    refused (the file would calibrate the wrong thing). Returns what was checked against, or which sources could
    not be checked and why."""
    d, checked, unchecked = declared["draft_len"], {}, {}
    for lv in levels:
        said, silent = _draft_reports(lv)
        for why in silent:
            unchecked.setdefault(why.split(" (")[0], why)
        for rep in said:
            source, where = rep["source"], f"at concurrency {lv['concurrency']}"
            if d == 0 and (rep["tokens"] or rep["steps"]):
                raise UserError(f"server {url} drafted {rep['tokens']} draft tokens {where} ({source}) but "
                                "--serves-draft-len 0 says it runs the target alone; give the draft length it was "
                                "started with")
            if rep["per_step"] is not None and rep["per_step"] > d + 1e-9:
                detail = f"; {rep['at']}" if rep["at"] else f": {rep['tokens']} draft tokens in {rep['steps']} steps"
                raise UserError(f"server {url} drafted {rep['per_step']:.2f} tokens per step {where} ({source}"
                                f"{detail}), more than --serves-draft-len {d}; give the draft length it was started "
                                "with")
            if rep["per_step"] is not None or (d == 0 and rep["tokens"] is not None):
                checked[source] = True
            else:
                unchecked.setdefault(source, f"{source} (draft tokens, no step count)")
    rule = "no drafts" if d == 0 else "draft tokens per step <= D"
    if checked:
        return f"checked against {' and '.join(checked)} ({rule})"
    return (f"unchecked: no source counts {'drafts' if d == 0 else 'draft steps'}: "
            + "; ".join(unchecked.values()))


def _write(data: dict, out: Path, force: bool, folder: Path, recipe_file: Path | None, args: dict) -> None:
    from trtllm_spec.core.files import atomic_dir, write_json_atomic, write_text_atomic
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.report.served import render_markdown

    files = sorted(p for p in folder.iterdir() if p.name.startswith("tokenizer") or p.suffix == ".jinja")
    files += [recipe_file] if recipe_file else []
    prov = provenance({"measure": args}, files, {"server": data["server"], "settings": data["settings"],
                                                 "suite": {k: data["suite"][k] for k in ("name", "items")}})
    with atomic_dir(out, force=force, inputs=(folder,)) as tmp:
        write_json_atomic(tmp / SERVED_FILE, data)
        write_text_atomic(tmp / "report.md", render_markdown(data))
        write_json_atomic(tmp / "provenance.json", prov)
