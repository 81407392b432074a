"""The TensorRT-LLM LLM API options a bundle serves with.

One dict, written as ``llm_api_options.yaml``: the file passed to ``trtllm-serve MODEL
--extra_llm_api_options`` and ``trtllm-bench ... throughput --extra_llm_api_options``, and (plus ``model`` and
``triton_config``) Triton's llmapi ``model.yaml``. The per-mechanism ``speculative_config`` comes from the
drafter descriptor (principle 3); everything produced here is checked with ``validate_options``.

Settings live only in this file, never also as CLI flags: precedence between the two changed between
releases (1.2: the YAML wins; main: explicit CLI flags win; notes §1.0).
"""

from __future__ import annotations

from collections.abc import Iterable

from trtllm_spec.core.releases import default_release
from trtllm_spec.core.releases import get as release_record
from trtllm_spec.deploy.trtllm_schema import validate_options
from trtllm_spec.drafters import registry
from trtllm_spec.errors import UserError

# recipe quantization.kv_cache_dtype -> KvCacheConfig.dtype. Upstream documents auto | fp8 | fp8_ds_mla | nvfp4
# (KvCacheConfig.dtype) and its TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype handles auto and fp8
# only, warning "Cannot sync quant_config.kv_cache_quant_algo with kv_cache_config.dtype of bfloat16" for a torch
# dtype name (llm_args.py of a 1.2-era release before 1.2.1, and main): a 16-bit KV cache is the model's own precision, written as auto.
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8", "bf16": "auto", "bfloat16": "auto", "fp16": "auto",
                   "float16": "auto"}


def _cuda_graph_config(batch_sizes: Iterable[int], schedule: dict[int, int] | None,
                       max_batch_size: int | None, profile: str | None = None) -> dict:
    """Graphs for the planned batch sizes plus the schedule's thresholds, with padding on.

    Padding rounds a batch up to the next captured size ("usually a net win", CudaGraphConfig); 1.3 forces
    ``enable_padding`` and merges the schedule keys into ``batch_sizes`` itself (MAIN
    ``TorchLlmArgs.validate_speculative_config``), so both are written explicitly here for every release.
    1.2 writes ``batch_sizes`` without ``max_batch_size``: the 1.2-era parser A refuses the two together and R12
    derives the maximum from the list (``trtllm_schema.PARSER_A_12``).
    """
    sizes = {int(b) for b in batch_sizes}
    if not sizes or min(sizes) < 1:
        raise UserError(f"cuda_graph_config.batch_sizes must be batch sizes >= 1, got {sorted(sizes)}")
    sizes |= {k for k in schedule or {} if k >= 1}  # a bad key is reported by the schedule's own check
    if max_batch_size:
        sizes = {b for b in sizes if b <= max_batch_size} | {max_batch_size}
    ordered = sorted(sizes)
    if not release_record(profile or default_release()).cuda_graph_max_batch_size:
        return {"batch_sizes": ordered, "enable_padding": True}
    return {"batch_sizes": ordered, "max_batch_size": ordered[-1], "enable_padding": True}


def make_llm_api_options(*, profile: str, drafter_type: str, drafter_config, speculative_model: str | None,
                         max_draft_len: int, draft_len_schedule: dict | None, tp: int, pp: int, ep: int,
                         max_batch_size: int | None, max_seq_len: int | None, batch_sizes: Iterable[int],
                         free_gpu_memory_fraction: float, enable_block_reuse: bool, kv_cache_dtype: str,
                         cuda_graphs: bool, drafter_extras: dict | None = None, max_num_tokens: int | None = None,
                         trust_remote_code: bool = False, disable_overlap_scheduler: bool | None = None,
                         max_concurrency: int | None = None, guided_decoding_backend: str | None = None) -> dict:
    """The LLM API options for one bundle; ``max_draft_len == 0`` means no speculation (no
    ``speculative_config``). Paths (``speculative_model``) are relative to the bundle root, where the
    generated scripts run; an HF id is passed through. ``max_concurrency`` (1.3+): speculation off above that
    batch size. ``drafter_extras``: what the mechanism read from its exported folder (``Mechanism.trtllm_extras``),
    passed through to its ``trtllm_speculative_config`` unread. Raises ``UserError`` if the result does not validate for ``profile``, or if D or a schedule is one
    the mechanism cannot run at (``Mechanism.only_draft_len``)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UserError(f"kv_cache_dtype {kv_cache_dtype!r} is not supported; valid: {', '.join(KV_CACHE_DTYPES)}")
    if max_draft_len < 0:
        raise UserError(f"max_draft_len = {max_draft_len} must be >= 0 (0 turns speculation off)")
    if speculative_model is not None and speculative_model.startswith(("/", "~")):
        raise UserError(f"speculative_model {speculative_model!r} is an absolute path; give it relative to the "
                        "bundle root (or an HF id) so the bundle can move")
    schedule = {int(k): int(v) for k, v in draft_len_schedule.items()} if draft_len_schedule else None

    options: dict = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    if ep > 1:
        options["moe_expert_parallel_size"] = ep
    if max_batch_size:
        options["max_batch_size"] = max_batch_size
    if max_num_tokens:
        options["max_num_tokens"] = max_num_tokens
    if max_seq_len:
        options["max_seq_len"] = max_seq_len
    if trust_remote_code:
        options["trust_remote_code"] = True
    options["kv_cache_config"] = {"free_gpu_memory_fraction": free_gpu_memory_fraction,
                                  "enable_block_reuse": enable_block_reuse,
                                  "dtype": KV_CACHE_DTYPES[kv_cache_dtype]}
    graph_sizes = schedule if max_draft_len > 0 else None
    options["cuda_graph_config"] = (_cuda_graph_config(batch_sizes, graph_sizes, max_batch_size, profile)
                                    if cuda_graphs else None)
    if disable_overlap_scheduler is not None:
        options["disable_overlap_scheduler"] = disable_overlap_scheduler
    options["enable_iter_perf_stats"] = True  # specDecodingStats in /metrics and llm.get_stats()
    if guided_decoding_backend is not None:  # the request mode asks for structured output (workload.request_mode)
        options["guided_decoding_backend"] = guided_decoding_backend

    if max_draft_len > 0:
        mechanism = registry.get(drafter_type)
        from trtllm_spec.core.trtllm_gates import engine_schedule

        applies, _, why = engine_schedule(mechanism, profile)
        if not applies and (schedule or max_concurrency is not None):
            what = f"draft_len_schedule {schedule}" if schedule else f"max_concurrency = {max_concurrency}"
            raise UserError(f"{what}: {why}, so it would be ignored; give one max_draft_len (or a separate "
                            "deployment without speculation above the batch size where it stops paying)")
        _check_one_draft_len(mechanism, drafter_config, max_draft_len, schedule)
        if max_concurrency is not None and schedule:
            raise UserError(f"max_concurrency = {max_concurrency} and draft_len_schedule {schedule} are mutually "
                            "exclusive in TensorRT-LLM (it turns max_concurrency into a schedule); give one")
        spec = mechanism.trtllm_speculative_config(
            drafter_config, profile=profile, max_draft_len=max_draft_len, speculative_model=speculative_model,
            **(drafter_extras or {}))
        from trtllm_spec.core.trtllm_gates import cutoff_gate

        schedule, gates, _ = cutoff_gate(schedule, max_draft_len, profile)
        spec.update(gates)
        if max_concurrency is not None:
            spec["max_concurrency"] = max_concurrency  # validate_options refuses it on 1.2 and beside a schedule
        if schedule:
            spec["draft_len_schedule"] = dict(sorted(schedule.items()))
        options["speculative_config"] = spec
    validate_options(options, profile)
    return options


def _check_one_draft_len(mechanism, cfg, max_draft_len: int, schedule: dict | None) -> None:
    only = mechanism.only_draft_len(cfg)
    if only is None:
        return
    if max_draft_len != only:
        raise UserError(f"max_draft_len = {max_draft_len}: TensorRT-LLM runs {mechanism.title} only at "
                        f"max_draft_len = block_size = {only}; use {only}, or 0 for no speculation")
    if schedule:
        raise UserError(f"draft_len_schedule {schedule}: TensorRT-LLM runs {mechanism.title} only at D = {only}, so "
                        "no schedule")


def render_yaml(options: dict, *, profile: str | None = None, note: str | None = None) -> str:
    """``options`` as YAML with a short header naming what reads it, and ``note`` (what the engine does at each
    batch size, from the plan) as comment lines."""
    import textwrap

    import yaml

    release = f" {profile}" if profile else ""
    header = (f"# TensorRT-LLM{release} LLM API options (trtllm-serve/trtllm-bench --extra_llm_api_options); "
              "generated by trtllm-spec\n")
    if note:
        header += "".join(f"# {line}\n" for line in textwrap.wrap(note, 110))
    return header + yaml.safe_dump(options, sort_keys=False, default_flow_style=False)
