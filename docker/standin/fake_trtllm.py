#!/usr/bin/env python3
"""A named FAKE of TensorRT-LLM's trtllm-serve / trtllm-bench / trtllm-llmapi-launch, for the stand-in serve image
of scripts/docker_check.sh only (TensorRT-LLM needs an NVIDIA GPU). It serves and measures nothing: it prints the
name it was called by and its arguments, and fails as the real tool would when a file it is given cannot be read or
the folder of --report_json cannot be written. trtllm-llmapi-launch runs the command it wraps, as the real one does
(examples/llm-api/llm_mgmn_trtllm_serve.sh)."""

import os
import sys

READ = ("--extra_llm_api_options", "--config", "--dataset", "--model_path")
WRITE = ("--report_json", "--output_json", "--request_json", "--iteration_log")


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    args = argv[1:]
    print(f"FAKE {name} (stand-in, not TensorRT-LLM): uid={os.getuid()} cwd={os.getcwd()} args={args}", flush=True)
    if name == "trtllm-llmapi-launch":
        if not args:
            print("trtllm-llmapi-launch: no command to launch", file=sys.stderr)
            return 2
        os.execvp(args[0], args)
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=")
        if key not in READ + WRITE:
            continue
        if not value:
            if i + 1 >= len(args):
                print(f"{name}: {key} needs a value", file=sys.stderr)
                return 2
            value = args[i + 1]
        if key in READ and not os.access(value, os.R_OK):
            print(f"{name}: {key} {value}: cannot read it", file=sys.stderr)
            return 1
        folder = os.path.dirname(os.path.abspath(value))
        if key in WRITE and not os.access(folder, os.W_OK):
            print(f"{name}: {key} {value}: folder {folder} is not writable", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
