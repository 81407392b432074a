from trtllm_spec.cli import main

main(prog_name="trtllm-spec")
