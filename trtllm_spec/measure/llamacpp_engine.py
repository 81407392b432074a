"""``measure llamacpp``: the suite through llama.cpp's own speculative decoding (native ``llama-server``),
an independent second opinion on a drafter our reference decoder measured.

Steps: the same suite, prompt ids and chat template as the reference decoder (data/user_suite.select_suite,
data/chat.prompt_ids) -> llama-server over the target GGUF alone: every prompt's target-only greedy output,
timed -> llama-server with the drafter GGUF (``--spec-type`` from the descriptor, exactly D drafts a step) ->
per prompt, ``POST /completion`` with the prompt's token ids, and ``/metrics`` read before and after it (one
slot, one request at a time) -> the speculation profile (``engine: llamacpp``).

How llama.cpp's counts become our iterations (docs/speculation_profile.md): llama-server counts, per request,
``n_draft_verif_steps`` (``spec_decode_num_drafts_total``: target steps that verified drafts),
``n_draft_accepted`` and, per draft position i, the steps that accepted more than i drafts
(``spec_decode_num_accepted_tokens_per_pos_total{position=i}``; tools/server/server-context.cpp). So the steps
that accepted exactly k drafts are ``per_pos[k-1] - per_pos[k]`` (``per_pos[-1]`` = the verification steps),
and the iterations that drafted nothing (llama-server drafts at most ``n_remaining - 1``, the rule our decoder
follows, so only the last step of a generation) are ``generated - 1 - accepted - verification steps``: the
first token comes from the prefill. AL = (generated - 1) / iterations, as ours. llama.cpp reports no order of
the steps; the profile's per-position rates use the histogram with the verification steps first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError
from trtllm_spec.measure.profile import PromptRun, requested_drafts

POS_METRIC = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
STEPS_METRIC = "llamacpp:spec_decode_num_drafts_total"
DRAFTED_METRIC = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED_METRIC = "llamacpp:spec_decode_num_accepted_tokens_total"


@dataclass(frozen=True)
class SpecCounts:
    steps: int  # verification steps
    drafted: int
    accepted: int
    per_pos: list[int]  # steps that accepted more than i drafts, i = 0..D-1


def counts_between(before: dict[str, float], after: dict[str, float], draft_len: int) -> SpecCounts:
    """The spec_decode counters' increase between two /metrics reads."""
    def delta(name: str) -> int:
        return int(round(after.get(name, 0.0) - before.get(name, 0.0)))

    per_pos = [delta(f'{POS_METRIC}{{position="{i}"}}') for i in range(draft_len)]
    return SpecCounts(delta(STEPS_METRIC), delta(DRAFTED_METRIC), delta(ACCEPTED_METRIC), per_pos)


def iterations_from_counts(c: SpecCounts, generated: int, draft_len: int) -> list[int]:
    """Accepted drafts per iteration (verification steps by accepted count, then the steps with no draft)."""
    ge = [c.steps, *c.per_pos, 0]  # ge[k]: steps that accepted at least k drafts
    exact = [ge[k] - ge[k + 1] for k in range(draft_len + 1)]
    if any(n < 0 for n in exact) or sum(k * n for k, n in enumerate(exact)) != c.accepted:
        raise UserError(f"llama-server's spec_decode counters disagree (steps {c.steps}, accepted {c.accepted}, "
                        f"per position {c.per_pos}); was another request served at the same time?")
    accepted = [k for k in range(draft_len, -1, -1) for _ in range(exact[k])]
    plain = generated - 1 - c.accepted - c.steps
    if -draft_len <= plain < 0 and c.steps:
        # the request ended inside its last verification step (an end token or n_predict): the counters count
        # every draft that step verified, the reply only the tokens up to the end; tokens not output are not
        # accepted (our decoder's rule too), so the step that ended it gives back the difference
        deficit = -plain
        take = min(deficit, accepted[0])  # the histogram is in descending order: a step that accepted the most
        accepted[0] -= take
        plain = take - deficit
        accepted.sort(reverse=True)
    if plain < 0:
        raise UserError(f"llama-server generated {generated} tokens but counted {c.steps} verification steps and "
                        f"{c.accepted} accepted drafts (more than the tokens); its counters cannot be turned "
                        "into iterations")
    return accepted + [0] * plain


def measure_llamacpp(server_binary: Path, target_gguf: Path, draft_gguf: Path, spec_type: str, target_dir: Path,
                     draft_len: int, *, drafter: dict, target: dict, llamacpp: dict, suite: str = SUITE_NAME,
                     categories: Sequence[str] | None = None, num_prompts: int = 10, max_new_tokens: int = 128,
                     temperature: float = 0.0, seed: int = 0, chat_template: str | Path | None = None,
                     dtype: str = "fp32", threads: int = 2, port: int = 8091,
                     progress: Callable[[str], None] | None = None,
                     suite_check: Callable[[list], dict] | None = None, log_dir: Path | None = None,
                     runs_out: list | None = None, request_mode=None) -> dict:
    """The speculation profile of llama.cpp running ``draft_gguf`` (``spec_type``) over ``target_gguf``;
    ``runs_out`` receives the per-prompt runs (token ids included)."""
    from trtllm_spec.measure.run import item_mode, resolve_mode, suite_prompts
    from trtllm_spec.serve.llamacpp import DraftSpec, NativeServer

    log = progress or (lambda _m: None)
    mode = resolve_mode(request_mode, temperature)
    temperature = mode.temperature
    items, suite_prov, overlap, tok, prompts = suite_prompts(target_dir, suite, categories, num_prompts, seed,
                                                            suite_check, chat_template, max_new_tokens, draft_len,
                                                            None, mode.chat_template_kwargs)
    reqs = [dict(top_p=mode.top_p, json_schema=item_mode(mode, it).json_schema()) for it in items]
    ctx = max(len(p) for p in prompts) + max_new_tokens + draft_len + 16
    common = dict(host="127.0.0.1", port=port, threads=threads, ctx=ctx, parallel=1)

    def logfile(name: str) -> Path | None:
        return log_dir / name if log_dir else None

    refs: list[tuple[list[int], float]] = []
    log(f"llama.cpp: target alone ({target_gguf.name}) over {len(items)} prompts")
    with NativeServer(server_binary, target_gguf, log_file=logfile("llama-server-target.log"), **common) as srv:
        srv.complete(prompts[0][-8:], 4, temperature, seed, top_p=mode.top_p)  # warm-up, untimed
        for ids, req in zip(prompts, reqs, strict=True):
            r = srv.complete(ids, max_new_tokens, temperature, seed, **req)
            refs.append((_tokens(r), _seconds(r)))
    runs: list[PromptRun] = []
    draft = DraftSpec(draft_gguf, spec_type, draft_len)
    log(f"llama.cpp: {spec_type} with {draft_gguf.name} at D={draft_len}")
    with NativeServer(server_binary, target_gguf, draft=draft, log_file=logfile("llama-server-spec.log"),
                      **common) as srv:
        srv.complete(prompts[0][-8:], 4, temperature, seed, top_p=mode.top_p)
        for i, (item, ids) in enumerate(zip(items, prompts, strict=True)):
            before = srv.metrics()
            r = srv.complete(ids, max_new_tokens, temperature, seed, **reqs[i])
            c = counts_between(before, srv.metrics(), draft_len)
            out = _tokens(r)
            timings = r.get("timings") or {}
            if int(timings.get("draft_n_accepted", c.accepted)) != c.accepted:
                raise UserError(f"llama-server's response timings ({timings.get('draft_n_accepted')} accepted) and "
                                f"/metrics ({c.accepted}) disagree for prompt {item.id}")
            accepted = iterations_from_counts(c, len(out), draft_len) if out else []
            requested = [max(q, a) if k < c.steps else 0  # the steps with no draft requested none
                         for k, (q, a) in enumerate(zip(requested_drafts(accepted, draft_len, max_new_tokens),
                                                        accepted, strict=True))]
            proposed = list(requested)  # p_min 0, n_min 0: llama.cpp drafts every position it is asked for
            ref, t_ref = refs[i]
            runs.append(PromptRun(item.id, item.category, len(ids), ref, out, t_ref, _seconds(r), accepted,
                                  proposed, requested, prefill_s=float(timings.get("prompt_ms", 0.0)) / 1e3))
            al = (len(out) - 1) / len(accepted) if accepted else 1.0
            log(f"[{i + 1}/{len(items)}] {item.id}: {len(out)} tokens, AL {al:.2f}"
                + ("" if out == ref else " (differs from llama.cpp's target-only greedy)"))
    if runs_out is not None:
        runs_out.extend(runs)
    from trtllm_spec.measure.engine_compare import engine_profile

    profile = engine_profile(
        runs, engine="llamacpp", engine_label=f"llama.cpp {llamacpp.get('commit', '')[:12]}", drafter=drafter,
        draft_len=draft_len, target=target, items=items, suite_prov=suite_prov, overlap=overlap, seed=seed,
        num_prompts=num_prompts, dtype=dtype, temperature=temperature, max_new_tokens=max_new_tokens,
        chat_template=chat_template, mode=mode, threads=threads, settings={
            "llamacpp": {**llamacpp, "spec_type": spec_type, "target_gguf": str(target_gguf),
                         "draft_gguf": str(draft_gguf), "spec_draft_p_min": 0, "spec_draft_n_min": 0},
            "reference": {"outputs": "llama.cpp target-only greedy (llama-server without the drafter)"}})
    if any(r["json_schema"] is not None for r in reqs):
        from trtllm_spec.measure.run import check_outputs

        profile["structured_output"] = check_outputs(tok, runs, [item_mode(mode, it) for it in items])
    return profile


def _tokens(r: dict) -> list[int]:
    toks = r.get("tokens")
    if not isinstance(toks, list):
        raise UserError("llama-server's /completion reply has no 'tokens' list (return_tokens); is it the build "
                        "'trtllm-spec assets build-llamacpp' made?")
    return [int(t) for t in toks]


def _seconds(r: dict) -> float:
    t = r.get("timings") or {}
    return (float(t.get("prompt_ms", 0.0)) + float(t.get("predicted_ms", 0.0))) / 1e3
