"""Runtime drafters read the *exported* drafter folders (the files TensorRT-LLM loads), without ModelOpt."""
