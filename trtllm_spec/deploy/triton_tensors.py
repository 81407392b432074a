"""Interface tables of the Triton models that serve TensorRT-LLM: tensor names, types and shapes, ensemble
wiring, and the parameter keys each model reads. Data only; ``triton.py`` renders it.

The tensors must match what NVIDIA's ``model.py`` files (taken from the Triton TensorRT-LLM container at run
time) read and write, so they restate upstream's ``config.pbtxt`` interfaces:
- llmapi: ``NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt`` @c8c6df08 (the
  set without image/LoRA inputs, which every 1.x model.py handles).
- inflight batcher: ``triton-inference-server/tensorrtllm_backend all_models/inflight_batcher_llm/
  {ensemble,preprocessing,tensorrt_llm,postprocessing,tensorrt_llm_bls}/config.pbtxt`` @c2e65b8 (now
  ``triton_backend/all_models/inflight_batcher_llm`` in NVIDIA/TensorRT-LLM).
Parameter keys: the same files and ``tensorrtllm_backend docs/model_config.md``.

Row format: ``name TYPE dims [opt] [ragged] [reshape]``; ``LOGITS`` is the logits data type chosen at write
time (``${logits_datatype}`` upstream); ``reshape`` means ``reshape: { shape: [ ] }``.
"""

from __future__ import annotations

LLMAPI_INPUTS = """
text_input STRING -1
streaming BOOL 1 opt
sampling_param_best_of INT32 1 opt
sampling_param_temperature FP32 1 opt
sampling_param_top_k INT32 1 opt
sampling_param_top_p FP32 1 opt
sampling_param_frequency_penalty FP32 1 opt
sampling_param_presence_penalty FP32 1 opt
sampling_param_max_tokens INT32 1 opt
sampling_param_stop STRING -1 opt
sampling_param_seed UINT64 1 opt
sampling_param_exclude_input_from_output BOOL 1 opt
sampling_param_return_perf_metrics BOOL 1 opt
return_finish_reason BOOL 1 opt
return_stop_reason BOOL 1 opt
return_cumulative_logprob BOOL 1 opt
stop BOOL 1 opt
"""

LLMAPI_OUTPUTS = """
text_output STRING -1
finish_reason STRING -1
stop_reason STRING -1
cumulative_logprob FP32 -1
kv_cache_reused_block INT32 -1
kv_cache_missed_block INT32 -1
kv_cache_alloc_new_blocks INT32 -1
kv_cache_alloc_total_blocks INT32 -1
kv_cache_hit_rate FP32 -1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
"""

# Optional inputs of upstream's llmapi config.pbtxt that ours leaves out, with the reason (docs/trtllm_compat.md,
# "Triton llmapi inputs"): declared by @0a71057313ec0626527e164a8fc0205c5822e2f5, absent from @c8c6df08. Leaving an
# input out means Triton refuses a request that sends it, so nothing a client sends is accepted and ignored.
LLMAPI_LEFT_OUT = {
    "image_url": "multimodal: upstream reads it only when model.yaml sets triton_config.multimodal, which a "
                 "bundle (a text LLM + drafter) never writes",
    "lora_id": "LoRA: a bundle carries no adapters and its LLM API options no lora_config, which LoRA requests need",
    "lora_name": "LoRA (with lora_id and lora_path, all three together)",
    "lora_path": "LoRA (a path on the Triton server's filesystem)",
    "lora_ckpt_source": "LoRA (checkpoint format of lora_path; default hf)",
}

PREPROCESSING_INPUTS = """
QUERY STRING 1
DECODER_QUERY STRING 1 opt
IMAGE_BYTES UINT8 -1,-1,-1,-1 opt
IMAGE_URL STRING 1 opt
VIDEO_BYTES UINT8 -1,-1,-1,-1 opt
REQUEST_OUTPUT_LEN INT32 1
BAD_WORDS_DICT STRING -1 opt
STOP_WORDS_DICT STRING -1 opt
EMBEDDING_BIAS_WORDS STRING -1 opt
EMBEDDING_BIAS_WEIGHTS FP32 -1 opt
END_ID INT32 1 opt
PAD_ID INT32 1 opt
PROMPT_TABLE_EXTRA_ID UINT64 1 opt
"""

PREPROCESSING_OUTPUTS = """
INPUT_ID INT32 -1
REQUEST_INPUT_LEN INT32 1
DECODER_INPUT_ID INT32 -1
REQUEST_DECODER_INPUT_LEN INT32 1
BAD_WORDS_IDS INT32 2,-1
STOP_WORDS_IDS INT32 2,-1
EMBEDDING_BIAS FP32 -1
REQUEST_OUTPUT_LEN INT32 -1
OUT_END_ID INT32 1
OUT_PAD_ID INT32 1
OUT_PROMPT_TABLE_EXTRA_IDS UINT64 -1
PIXEL_VALUES FP16 -1,-1,-1,-1
ASPECT_RATIO_IDS INT64 -1
ASPECT_RATIO_MASK INT64 -1,-1
CROSS_ATTENTION_MASK INT64 -1,-1,-1
IMAGE_SIZES INT64 2
IS_VIDEO_INPUT BOOL 1
ATTENTION_MASK INT64 -1
IMAGE_GRID_THW INT64 3
VISION_INPUT_ID INT32 -1
"""

POSTPROCESSING_INPUTS = """
TOKENS_BATCH INT32 -1,-1
SEQUENCE_LENGTH INT32 -1
"""

POSTPROCESSING_OUTPUTS = """
OUTPUT STRING -1
"""

TRTLLM_INPUTS = """
input_ids INT32 -1 opt ragged
encoder_input_features FP16 -1,-1 opt ragged
encoder_output_lengths INT32 1 opt reshape
input_lengths INT32 1 reshape
request_output_len INT32 1 reshape
num_return_sequences INT32 1 opt reshape
draft_input_ids INT32 -1 opt ragged
decoder_input_ids INT32 -1 opt ragged
decoder_input_lengths INT32 1 opt reshape
draft_logits LOGITS -1,-1 opt ragged
draft_acceptance_threshold FP32 1 opt reshape
end_id INT32 1 opt reshape
pad_id INT32 1 opt reshape
stop_words_list INT32 2,-1 opt ragged
bad_words_list INT32 2,-1 opt ragged
embedding_bias FP32 -1 opt ragged
beam_width INT32 1 opt reshape
temperature FP32 1 opt reshape
runtime_top_k INT32 1 opt reshape
runtime_top_p FP32 1 opt reshape
runtime_top_p_min FP32 1 opt reshape
runtime_top_p_decay FP32 1 opt reshape
runtime_top_p_reset_ids INT32 1 opt reshape
len_penalty FP32 1 opt reshape
early_stopping BOOL 1 opt reshape
repetition_penalty FP32 1 opt reshape
min_tokens INT32 1 opt reshape
beam_search_diversity_rate FP32 1 opt reshape
presence_penalty FP32 1 opt reshape
frequency_penalty FP32 1 opt reshape
seed UINT64 1 opt reshape
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
return_perf_metrics BOOL 1 opt reshape
exclude_input_in_output BOOL 1 opt reshape
stop BOOL 1 opt reshape
streaming BOOL 1 opt reshape
prompt_embedding_table FP16 -1,-1 opt ragged
prompt_table_extra_ids UINT64 -1 opt ragged
prompt_vocab_size INT32 1 opt reshape
cross_attention_mask BOOL -1,-1 opt ragged
mrope_rotary_cos_sin FP32 -1 opt
mrope_position_deltas INT64 1 opt
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
context_phase_params UINT8 -1 opt ragged
skip_cross_attn_blocks BOOL 1 opt ragged
retention_token_range_starts INT32 -1 opt ragged
retention_token_range_ends INT32 -1 opt ragged
retention_token_range_priorities INT32 -1 opt ragged
retention_token_range_durations_ms INT32 -1 opt ragged
retention_decode_priority INT32 1 opt ragged
retention_decode_duration_ms INT32 1 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
lookahead_window_size INT32 1 opt ragged
lookahead_ngram_size INT32 1 opt ragged
lookahead_verification_set_size INT32 1 opt ragged
"""

# per-request statistics, identical in tensorrt_llm, ensemble and tensorrt_llm_bls outputs
STATS_OUTPUTS = """
batch_index INT32 1
sequence_index INT32 1
kv_cache_alloc_new_blocks INT32 1
kv_cache_reused_blocks INT32 1
kv_cache_alloc_total_blocks INT32 1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
"""

TRTLLM_OUTPUTS = """
output_ids INT32 -1,-1
sequence_length INT32 -1
cum_log_probs FP32 -1
output_log_probs FP32 -1,-1
context_logits LOGITS -1,-1
generation_logits LOGITS -1,-1,-1
context_phase_params UINT8 -1
""" + STATS_OUTPUTS

TEXT_OUTPUTS = """
text_output STRING -1
cum_log_probs FP32 -1
output_log_probs FP32 -1,-1
context_logits LOGITS -1,-1
generation_logits LOGITS -1,-1,-1
""" + STATS_OUTPUTS

ENSEMBLE_INPUTS = """
text_input STRING 1
decoder_text_input STRING 1 opt
max_tokens INT32 1
num_return_sequences INT32 1 opt
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt
return_context_logits BOOL 1 opt
return_generation_logits BOOL 1 opt
return_perf_metrics BOOL 1 opt
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_table_extra_id UINT64 1 opt
prompt_vocab_size INT32 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
lora_task_id UINT64 1 opt
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
"""

BLS_INPUTS = """
text_input STRING 1
decoder_text_input STRING 1 opt
image_input FP16 -1,3,-1,-1 opt
image_bytes_input UINT8 -1,-1,-1,-1 opt
image_url_input STRING 1 opt
video_bytes_input UINT8 -1,-1,-1,-1 opt
max_tokens INT32 1
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
num_return_sequences INT32 1 opt reshape
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_vocab_size INT32 1 opt
prompt_table_extra_id UINT64 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
num_draft_tokens INT32 1 opt
use_draft_logits BOOL 1 opt reshape
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
return_perf_metrics BOOL 1 opt reshape
guided_decoding_guide_type STRING 1 opt
guided_decoding_guide STRING 1 opt
"""

# ensemble wiring: step model -> (input_map, output_map) as "model_tensor:ensemble_tensor" (bare = same name)
ENSEMBLE_PREPROCESSING = (
    "QUERY:text_input DECODER_QUERY:decoder_text_input REQUEST_OUTPUT_LEN:max_tokens BAD_WORDS_DICT:bad_words "
    "STOP_WORDS_DICT:stop_words EMBEDDING_BIAS_WORDS:embedding_bias_words "
    "EMBEDDING_BIAS_WEIGHTS:embedding_bias_weights END_ID:end_id PAD_ID:pad_id "
    "PROMPT_TABLE_EXTRA_ID:prompt_table_extra_id",
    "REQUEST_INPUT_LEN:_REQUEST_INPUT_LEN INPUT_ID:_INPUT_ID REQUEST_DECODER_INPUT_LEN:_REQUEST_DECODER_INPUT_LEN "
    "DECODER_INPUT_ID:_DECODER_INPUT_ID REQUEST_OUTPUT_LEN:_REQUEST_OUTPUT_LEN STOP_WORDS_IDS:_STOP_WORDS_IDS "
    "BAD_WORDS_IDS:_BAD_WORDS_IDS EMBEDDING_BIAS:_EMBEDDING_BIAS OUT_END_ID:_PREPROCESSOR_END_ID "
    "OUT_PAD_ID:_PREPROCESSOR_PAD_ID OUT_PROMPT_TABLE_EXTRA_IDS:_OUT_PROMPT_TABLE_EXTRA_IDS",
)
ENSEMBLE_TRTLLM = (
    "input_ids:_INPUT_ID decoder_input_ids:_DECODER_INPUT_ID input_lengths:_REQUEST_INPUT_LEN "
    "decoder_input_lengths:_REQUEST_DECODER_INPUT_LEN exclude_input_in_output "
    "request_output_len:_REQUEST_OUTPUT_LEN end_id:_PREPROCESSOR_END_ID pad_id:_PREPROCESSOR_PAD_ID "
    "embedding_bias:_EMBEDDING_BIAS runtime_top_k:top_k runtime_top_p:top_p temperature len_penalty:length_penalty "
    "repetition_penalty min_tokens presence_penalty frequency_penalty seed return_log_probs return_context_logits "
    "return_generation_logits return_perf_metrics num_return_sequences beam_width streaming:stream "
    "prompt_embedding_table prompt_vocab_size stop_words_list:_STOP_WORDS_IDS bad_words_list:_BAD_WORDS_IDS "
    "prompt_table_extra_ids:_OUT_PROMPT_TABLE_EXTRA_IDS lora_task_id lora_weights lora_config "
    "guided_decoding_guide_type guided_decoding_guide",
    "output_ids:_TOKENS_BATCH sequence_length:_SEQUENCE_LENGTH cum_log_probs output_log_probs context_logits "
    "generation_logits batch_index sequence_index kv_cache_alloc_new_blocks kv_cache_reused_blocks "
    "kv_cache_alloc_total_blocks arrival_time_ns first_scheduled_time_ns first_token_time_ns last_token_time_ns "
    "acceptance_rate total_accepted_draft_tokens total_draft_tokens",
)
ENSEMBLE_POSTPROCESSING = ("TOKENS_BATCH:_TOKENS_BATCH SEQUENCE_LENGTH:_SEQUENCE_LENGTH", "OUTPUT:text_output")

# parameter keys each model reads (the allow-list check_triton_repo enforces)
PARAMETER_KEYS: dict[str, frozenset[str]] = {
    "llmapi": frozenset({"gpu_device_ids"}),
    "ensemble": frozenset(),
    "preprocessing": frozenset({"tokenizer_dir", "add_special_tokens", "multimodal_model_path", "gpt_model_path",
                                "max_num_images", "hf_model_path"}),
    "postprocessing": frozenset({"tokenizer_dir", "skip_special_tokens"}),
    "tensorrt_llm_bls": frozenset({"accumulate_tokens", "tensorrt_llm_model_name", "tensorrt_llm_draft_model_name",
                                   "multimodal_encoders_name"}),
    "tensorrt_llm": frozenset({
        "max_beam_width", "FORCE_CPU_ONLY_INPUT_TENSORS", "gpt_model_type", "gpt_model_path", "encoder_model_path",
        "max_tokens_in_paged_kv_cache", "max_attention_window_size", "sink_token_length", "batch_scheduler_policy",
        "kv_cache_free_gpu_mem_fraction", "cross_kv_cache_fraction", "kv_cache_host_memory_bytes",
        "kv_cache_onboard_blocks", "exclude_input_in_output", "cancellation_check_period_ms",
        "stats_check_period_ms", "recv_poll_period_ms", "iter_stats_max_iterations",
        "request_stats_max_iterations", "enable_kv_cache_reuse", "normalize_log_probs", "enable_chunked_context",
        "gpu_device_ids", "participant_ids", "num_nodes", "lora_cache_optimal_adapter_size",
        "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction", "lora_cache_host_memory_bytes",
        "lora_prefetch_dir", "decoding_mode", "executor_worker_path", "lookahead_window_size",
        "lookahead_ngram_size", "lookahead_verification_set_size", "medusa_choices", "eagle_choices",
        "gpu_weights_percent", "enable_context_fmha_fp32_acc", "multi_block_mode", "cuda_graph_mode",
        "cuda_graph_cache_size", "speculative_decoding_fast_logits", "tokenizer_dir", "guided_decoding_backend",
        "xgrammar_tokenizer_info_path"}),
}

# decoding_mode values of the C++ backend (docs/model_config.md "Decoding mode")
DECODING_MODES = ("top_k", "top_p", "top_k_top_p", "beam_search", "medusa", "redrafter", "lookahead", "eagle")
