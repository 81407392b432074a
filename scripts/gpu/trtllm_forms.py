"""Which of the forms a bundle could write does the installed TensorRT-LLM read? (docs/trtllm_compat.md, "Not
settled here"). Run inside NVIDIA's TensorRT-LLM container: ``bash scripts/gpu/gpu_check.sh --trtllm-forms``.

Prints, for the installed release: whether each speculative_config form parses the way YAML options are parsed
(``update_llm_args_with_extra_dict``, what trtllm-serve / trtllm-bench / Triton's model.py call, then the
``TorchLlmArgs`` field type), which speculative decoding modes ``support_dynamic_draft_len()`` lists, and whether
the EAGLE-3 loader remaps ``layers.X.`` tensors to ``midlayer``. Nothing is loaded onto a GPU.
"""

from __future__ import annotations

import inspect
import json

FORMS = {
    "eagle3: decoding_type Eagle + speculative_model_dir (what 1.2 bundles write)":
        {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "drafter"},
    "eagle3: decoding_type Eagle3 + speculative_model (1.3 / 1.4 bundles)":
        {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "drafter"},
    "draft-target: Draft_Target": {"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "d"},
    "draft-target: DraftTarget": {"decoding_type": "DraftTarget", "max_draft_len": 3, "speculative_model_dir": "d"},
    "ngram with a 1.2-style schedule {1: 3, 8: 1}": {"decoding_type": "NGram", "max_draft_len": 3,
                                                     "draft_len_schedule": {1: 3, 8: 1}},
    "1.2 acceptance gate names": {"decoding_type": "NGram", "max_draft_len": 3, "acceptance_window": 8,
                                  "acceptance_length_threshold": 1.2},
    "1.3+ acceptance gate names": {"decoding_type": "NGram", "max_draft_len": 3, "acceptance_rate_window_size": 8,
                                   "acceptance_rate_threshold": 0.2},
}


def parse(spec: dict) -> str:
    from pydantic import TypeAdapter
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
    from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

    try:
        args = update_llm_args_with_extra_dict({}, {"speculative_config": dict(spec)})
        value = args["speculative_config"]
        if isinstance(value, dict):
            value = TypeAdapter(TorchLlmArgs.model_fields["speculative_config"].annotation).validate_python(value)
        return f"accepted as {type(value).__name__}"
    except Exception as exc:  # report every refusal, whatever its type
        return f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


def main() -> None:
    try:
        import tensorrt_llm
    except Exception as exc:  # ImportError, or CUDA/driver errors raised while importing
        raise SystemExit(f"trtllm_forms.py: tensorrt_llm does not import here ({type(exc).__name__}); run it inside "
                         "NVIDIA's TensorRT-LLM container (docs/docker.md)") from None

    out: dict = {"tensorrt_llm": tensorrt_llm.__version__, "forms": {k: parse(v) for k, v in FORMS.items()}}
    from tensorrt_llm._torch.speculative.interface import SpeculativeDecodingMode

    out["support_dynamic_draft_len"] = sorted(
        m.name for m in SpeculativeDecodingMode if getattr(m, "support_dynamic_draft_len", lambda: False)())
    from tensorrt_llm._torch.models.modeling_speculative import Eagle3ForCausalLM

    src = inspect.getsource(Eagle3ForCausalLM.load_weights)
    out["eagle3_loader_remaps_layers_to_midlayer"] = "midlayer" in src
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
