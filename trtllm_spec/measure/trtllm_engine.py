"""``measure trtllm``: run the suite through TensorRT-LLM's LLM API with a bundle's options.

The only module that imports ``tensorrt_llm`` (inside ``measure_trtllm``). What TensorRT-LLM reports, read in
NVIDIA/TensorRT-LLM release 1.2.1 (``tensorrt_llm/llmapi/llm.py``, ``cpp/include/tensorrt_llm/executor/types.h``:
``SpecDecodingStats``, ``RequestPerfMetrics::SpeculativeDecodingMetrics``; not run here: no GPU, no TensorRT-LLM):

- per request (``SamplingParams(return_perf_metrics=True)``): ``CompletionOutput.request_perf_metrics.
  speculative_decoding.{acceptance_rate, total_accepted_draft_tokens, total_draft_tokens}``;
- per iteration (``LLM(enable_iter_perf_stats=True)``, then ``llm.get_stats()``): dicts whose
  ``specDecodingStats`` hold ``numDraftTokens``, ``numAcceptedTokens``, ``numRequestsWithDraftTokens`` and
  ``acceptanceLength`` = (accepted + requests) / requests.

Neither gives per-position rates, so a TensorRT-LLM profile has AL at the bundle's D only
(``conditional_rates``: null). The parsing below is pure and unit-tested with fakes of those interfaces.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.bundle import Bundle
from trtllm_spec.core.releases import get as release
from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError
from trtllm_spec.measure.engine_common import options_type


@dataclass(frozen=True)
class RequestAcceptance:
    generated_tokens: int
    accepted: int  # accepted draft tokens
    drafted: int  # proposed draft tokens
    iterations: int  # generation steps, derived: tokens = 1 (context phase) + iterations + accepted

    @property
    def acceptance_length(self) -> float:
        return (self.iterations + self.accepted) / self.iterations if self.iterations else 1.0


# ---- pure parsing --------------------------------------------------------------------------------------

def request_acceptance(completion) -> RequestAcceptance:
    """From a ``CompletionOutput``: its ``token_ids`` and ``request_perf_metrics.speculative_decoding``."""
    tokens = len(completion.token_ids)
    metrics = getattr(completion, "request_perf_metrics", None)
    spec = getattr(metrics, "speculative_decoding", None)
    if spec is None:
        raise UserError("TensorRT-LLM returned no request_perf_metrics.speculative_decoding; the request needs "
                        "SamplingParams(return_perf_metrics=True) and the bundle a speculative_config")
    accepted, drafted = int(spec.total_accepted_draft_tokens), int(spec.total_draft_tokens)
    iterations = max(0, tokens - 1 - accepted)
    return RequestAcceptance(tokens, accepted, drafted, iterations)


def iteration_acceptance(stats: Iterable, where: str = "llm.get_stats()") -> dict | None:
    """Totals over ``llm.get_stats()`` entries (dicts, or their JSON text; ``where`` names them); None without
    speculative steps."""
    from trtllm_spec.measure.iteration_stats import iteration_totals

    t = iteration_totals(stats, where, required=False)
    if t is None:
        return None
    drafted, accepted, requests = (t[k] for k in ("num_draft_tokens", "num_accepted_tokens",
                                                 "num_requests_with_draft_tokens"))
    return {"num_draft_tokens": drafted, "num_accepted_tokens": accepted, "num_requests_with_draft_tokens": requests,
            "acceptance_length": (accepted + requests) / requests,
            "draft_acceptance_rate": accepted / drafted if drafted else None}


def trtllm_section(requests: Sequence[RequestAcceptance], iteration: dict | None, draft_len: int, *,
                   spec_s: float, target_s: float | None, reference: Sequence[list[int]] | None,
                   outputs: Sequence[list[int]], greedy: bool) -> dict:
    """A profile section (schema in docs/speculation_profile.md) from TensorRT-LLM's counters. AL comes from
    the iteration stats when present (exact), else from the per-request counters (derived)."""
    from trtllm_spec.measure.profile import common_prefix

    its = sum(r.iterations for r in requests)
    accepted, drafted = sum(r.accepted for r in requests), sum(r.drafted for r in requests)
    derived = (its + accepted) / its if its else 1.0
    al = min(1.0 + draft_len, iteration["acceptance_length"]) if iteration else derived
    tokens = sum(len(o) for o in outputs)
    tps_s = tokens / spec_s if spec_s > 0 else None
    ref_tokens = sum(len(r) for r in reference) if reference is not None else None
    tps_t = ref_tokens / target_s if reference is not None and target_s else None
    compare = greedy and reference is not None
    return {
        "num_prompts": len(requests), "generated_tokens": tokens, "reference_tokens": ref_tokens, "iterations": its,
        "mean_acceptance_length": round(al, 6), "conditional_rates": None, "marginal_rates": None,
        "acceptance_length": {str(draft_len): round(al, 6)}, "al_histogram": None,
        "draft_acceptance_rate": round(accepted / drafted, 6) if drafted else None,
        "acceptance_source": "iteration_stats" if iteration else "request_perf_metrics (derived iterations)",
        "tokens_per_s_target": round(tps_t, 3) if tps_t else None,
        "tokens_per_s_spec": round(tps_s, 3) if tps_s else None,
        "speedup": round(tps_s / tps_t, 4) if tps_s and tps_t else None,
        "time_s": {"target": target_s, "spec": spec_s},
        "identical_outputs": sum(a == b for a, b in zip(reference, outputs, strict=True)) if compare else None,
        "token_agreement": (round(sum(common_prefix(a, b) for a, b in zip(reference, outputs, strict=True))
                                  / max(1, ref_tokens), 6) if compare else None),
    }




def bundle_draft_len(options: dict) -> int:
    spec = options["speculative_config"]
    d = spec.get("max_draft_len") or spec.get("num_nextn_predict_layers")
    if not isinstance(d, int) or d < 1:
        raise UserError(f"the bundle's speculative_config has no max_draft_len >= 1 (got {d!r})")
    return d


def gpu_command(*, target: str, bundle: str, draft_len: int | None, suite: str, categories: Sequence[str] | None,
                num_prompts: int, max_new_tokens: int, temperature: float, out: str | None) -> str:
    """The command that runs this measurement where TensorRT-LLM and a GPU are."""
    args = ["trtllm-spec", "measure", "trtllm", "--target", target, "--bundle", bundle]
    if draft_len is not None:
        args += ["--draft-len", str(draft_len)]
    args += ["--suite", suite]
    if categories:
        args += ["--categories", ",".join(categories)]
    args += ["--num-prompts", str(num_prompts), "--max-new-tokens", str(max_new_tokens),
             "--temperature", str(temperature)]
    if out:
        args += ["--out", out]
    return " ".join(shlex.quote(a) for a in args)


# ---- the run (needs tensorrt_llm and a GPU) ------------------------------------------------------------

def measure_trtllm(target_dir: str | Path, bundle: Bundle, draft_len: int | None = None, *,
                   suite: str = SUITE_NAME, categories: Sequence[str] | None = None, num_prompts: int = 10,
                   max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
                   chat_template: str | Path | None = None, baseline: bool = True, out: str | None = None,
                   progress: Callable[[str], None] | None = None, suite_check: Callable[[list], dict] | None = None
                   ) -> dict:
    """The speculation profile measured with TensorRT-LLM (batch size 1, one prompt at a time) with the speculative
    options of ``bundle`` (its record: core.bundle.read_bundle)."""
    from trtllm_spec.measure.run import check_settings, target_checkpoint, target_summary

    log = progress or (lambda _m: None)
    options = bundle.speculative_options(absolute_paths=True)
    d = bundle_draft_len(options)
    if draft_len is not None and draft_len != d:
        raise UserError(f"--draft-len {draft_len} differs from the bundle's max_draft_len {d}; omit --draft-len "
                        "or rebuild the bundle")
    check_settings(d, max_new_tokens, temperature, "fp32")
    target_path, target_cfg = target_checkpoint(target_dir)
    try:
        import tensorrt_llm
        from tensorrt_llm import LLM, SamplingParams
    except ImportError:
        cmd = gpu_command(target=str(target_dir), bundle=str(bundle.path), draft_len=draft_len, suite=suite,
                          categories=categories, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                          temperature=temperature, out=out)
        raise UserError(f"TensorRT-LLM is not installed here; run this on a GPU node with: {cmd}\n"
                        f"(inside NVIDIA's container {release(bundle.profile).image}, the bundle's TensorRT-LLM "
                        f"{bundle.profile}, or after pip install 'trtllm-spec[trtllm]')"
                        ) from None
    from trtllm_spec.measure.run import suite_prompts  # the suite's token ids, as every engine gets them

    items, suite_prov, overlap, _tok, prompts = suite_prompts(
        target_path, suite, categories, num_prompts, seed, suite_check, chat_template, max_new_tokens, d,
        target_cfg.get("max_position_embeddings"))
    import torch

    if not torch.cuda.is_available():
        raise UserError("TensorRT-LLM is installed but no CUDA GPU is visible; run on a GPU node")
    greedy = temperature <= 0
    sampling = SamplingParams(max_tokens=max_new_tokens, return_perf_metrics=True,
                              **({"top_k": 1} if greedy else {"temperature": temperature, "seed": seed}))
    kwargs = {k: v for k, v in options.items() if k not in ("model", "triton_config")}
    by_cat: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        by_cat.setdefault(it.category, []).append(i)

    def run_all(llm) -> tuple[list, dict[str, float], dict[str, list]]:
        llm.generate([{"prompt_token_ids": prompts[0][-8:]}], SamplingParams(max_tokens=4))  # warm-up
        llm.get_stats(timeout=2)
        outs, secs, stats = [None] * len(items), {}, {}
        for cat, idx in by_cat.items():
            t0 = time.perf_counter()
            for i in idx:  # one at a time: batch size 1, as the PyTorch engine measures
                outs[i] = llm.generate([{"prompt_token_ids": prompts[i]}], sampling)[0].outputs[0]
                log(f"[{i + 1}/{len(items)}] {items[i].id}")
            secs[cat] = time.perf_counter() - t0
            stats[cat] = list(llm.get_stats(timeout=2))
        return outs, secs, stats

    log(f"TensorRT-LLM {tensorrt_llm.__version__}: {target_path} with {options['speculative_config']['decoding_type']}")
    with LLM(model=str(target_path), **{"enable_iter_perf_stats": True, **kwargs}) as llm:
        spec_outs, spec_secs, spec_stats = run_all(llm)
    ref_outs, ref_secs = None, {}
    if baseline:
        base_kwargs = {k: v for k, v in kwargs.items() if k != "speculative_config"}
        with LLM(model=str(target_path), **base_kwargs) as llm:
            ref_outs, ref_secs, _ = run_all(llm)
    reqs = [request_acceptance(o) for o in spec_outs]

    def sect(idx: Sequence[int], cats: Sequence[str]) -> dict:
        it_stats = iteration_acceptance(e for c in cats for e in spec_stats[c])
        return trtllm_section([reqs[i] for i in idx], it_stats, d, spec_s=sum(spec_secs[c] for c in cats),
                              target_s=sum(ref_secs[c] for c in cats) if ref_outs else None,
                              reference=[list(ref_outs[i].token_ids) for i in idx] if ref_outs else None,
                              outputs=[list(spec_outs[i].token_ids) for i in idx], greedy=greedy)

    from trtllm_spec.core.artifacts import SpeculationProfile
    from trtllm_spec.measure.profile import acceptance_kind

    spec = options["speculative_config"]
    kind = options_type(options, bundle)  # the bundle's record tells apart the mechanisms that share a tag
    return SpeculationProfile.build(
        engine="trtllm",
        drafter={"type": kind, "path": spec.get("speculative_model") or spec.get("speculative_model_dir"),
                 "draft_len": d,
                 "acceptance_kind": acceptance_kind(kind),
                 "al_method": "measured_at_bundle_draft_len", "bundle": str(bundle.path.resolve())},
        target=target_summary(target_dir, target_path, target_cfg),
        suite={**suite_prov, "seed": seed, "num_prompts_per_category": num_prompts,
               "item_ids": [it.id for it in items], **({"overlap": overlap} if overlap else {})},
        settings={"dtype": "bundle", "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
                  "trtllm_version": tensorrt_llm.__version__, "llm_api_options": options,
                  "machine": {"device": torch.cuda.get_device_name(0)}},
        overall=sect(range(len(items)), list(by_cat)),
        categories={c: sect(idx, [c]) for c, idx in by_cat.items()},
    )
