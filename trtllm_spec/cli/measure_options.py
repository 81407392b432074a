"""The options of the ``measure`` subcommands as small decorators: each subcommand stacks only the groups it reads
(``tests/cli/test_cli_measure.py`` checks every option it lists is read by its code). A later option group (e.g. a
request mode) is one more decorator attached to the subcommands that read it."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import field_choices, field_default
from trtllm_spec.core.bundle import PROFILE_FILE
from trtllm_spec.core.recipe import MeasureConfig as M


def stack(*decorators):
    """Apply ``decorators`` in the order written (the first is the first option in ``--help``)."""
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def target_option(required: bool = True, help: str = "Target HF checkpoint folder or fetched asset "
                  "(e.g. smollm2-135m)."):
    return click.option("--target", required=required, help=help)


def draft_len_option(required: bool = True, help: str = "D: drafts per target iteration."):
    return click.option("--draft-len", type=int, required=required, help=help)


def drafter_flag_options(f):
    """The reference decoder's drafter settings (the recipe's drafter section of a model-free mechanism, or the
    SA enhancer of an EAGLE-3 / MTP folder)."""
    return stack(
        click.option("--max-matching-ngram-size", type=int, help="ngram: longest n-gram matched (default 3); "
                     "suffix: -1 = the longest suffix match (default), k > 0 = sizes k down to 1."),
        click.option("--global-pool", is_flag=True, help="suffix, or with --sa-enhancer-threshold: match across the "
                     "suite's earlier prompts and outputs too (TensorRT-LLM enable_global_pool), in suite order."),
        click.option("--global-pool-size", type=int, help="suffix --global-pool: automaton slots; the oldest "
                     "finished prompt leaves first (default: TensorRT-LLM's max(64, max batch size) = 64 here, where "
                     "one request runs at a time)."),
        click.option("--sa-enhancer-threshold", type=int, help="EAGLE-3 / MTP folder: TensorRT-LLM's SA enhancer; "
                     "suffix drafts replace the head's where the match is at least this long (sa_config.threshold)."),
    )(f)


def suite_options(f):
    """Which prompts: the suite, its selection, the overlap check against training data, the chat template."""
    return stack(
        click.option("--suite", default=field_default(M, "suite"), show_default=True, metavar="speed-lite|FILE|DIR",
                     help="Prompt suite: the built-in speed-lite, or your own JSONL file (or a folder of them, one "
                     "per category): OpenAI 'messages', 'prompt' or ShareGPT 'conversations' per line, optional "
                     "'category'."),
        click.option("--categories", help="Comma-separated suite categories (default: all)."),
        click.option("--num-prompts", type=int, default=field_default(M, "num_prompts"), show_default=True,
                     help="Prompts per category."),
        click.option("--seed", type=int, default=field_default(M, "seed"), show_default=True,
                     help="Suite selection and sampling seed."),
        click.option("--training-data", type=click.Path(path_type=Path),
                     help="With your own --suite: the drafter's training conversations (JSONL); suite prompts found "
                     "there are refused (the packaged train pools are always checked)."),
        click.option("--allow-overlap", is_flag=True, help="Measure suite prompts that are also training prompts, "
                     "with a warning giving their count."),
        click.option("--chat-template", type=click.Path(path_type=Path),
                     help="Jinja chat template, if the checkpoint lacks one."),
    )(f)


def max_new_tokens_option(f):
    return click.option("--max-new-tokens", type=int, default=field_default(M, "max_new_tokens"),
                        show_default=True, help="Tokens generated per prompt (at most).")(f)


def temperature_option(help: str = "0 = greedy (outputs compared)."):
    return click.option("--temperature", type=float, default=field_default(M, "temperature"), show_default=True,
                        help=help)


def generation_options(temperature_help: str = "0 = greedy (outputs compared)."):
    return stack(max_new_tokens_option, temperature_option(temperature_help))


def reference_options(f):
    """Where and how the reference decoder runs the target."""
    return stack(
        click.option("--dtype", type=click.Choice(field_choices(M, "dtype")), default=field_default(M, "dtype"),
                     show_default=True, help="Precision of the PyTorch reference run (auto: runtime/device.py's "
                     "rule, bf16 where fast)."),
        click.option("--device", type=click.Choice(field_choices(M, "device")), default=field_default(M, "device"),
                     show_default=True, help="Where the reference decoder runs (auto: CUDA when torch sees a GPU)."),
        click.option("--reference-engine", type=click.Choice(field_choices(M, "reference_engine")),
                     default=field_default(M, "reference_engine"), show_default=True,
                     help="What runs the target in the reference decoder: ours (Llama, Mistral, Qwen2, Qwen3; "
                     "faster), hf (transformers: any architecture, e.g. MoE), auto (ours where it runs the target, "
                     "else hf)."),
    )(f)


def bundle_option(required: bool, help: str):
    return click.option("--bundle", type=click.Path(path_type=Path), required=required, help=help)


def budget_option(f):
    return click.option("--allow-long", is_flag=True, help="Start a measurement above the budget limit (200,000 "
                        "generated tokens: every decode of every request x --max-new-tokens; the budget is printed "
                        "first either way).")(f)


def output_options(what: str = PROFILE_FILE):
    return stack(
        click.option("--out", type=click.Path(path_type=Path), help=f"Write {what}, report.md and provenance here."),
        click.option("--force", is_flag=True, help="Replace a non-empty --out folder (only one trtllm-spec wrote)."),
        click.option("--json", "as_json", is_flag=True, help=f"Print {what} to stdout."),
    )


def served_options(f):
    """The endpoint, its load levels, and the prediction printed beside the measurement."""
    return stack(
        click.option("--server-url", metavar="URL", required=True, help="The server, e.g. http://127.0.0.1:8000 "
                     "(trtllm-serve, vLLM, SGLang, llama.cpp; 'trtllm-spec assets serve' starts one here)."),
        click.option("--server-model", metavar="ID", help="The model id to request, when the server lists several "
                     "in /v1/models, or one whose id does not name the target and that cannot be checked (no "
                     "/tokenize, no usage): naming it says it is the target."),
        click.option("--concurrency", default="1,4,16", show_default=True, metavar="N[,N...]",
                     help="Requests in flight, one measurement per level."),
        click.option("--request-timeout", type=float, default=300.0, show_default=True,
                     help="Seconds one streamed request may take."),
        click.option("--recipe", "recipe_file", type=click.Path(path_type=Path), help="The recipe whose planner "
                     "prediction (hardware, drafter, acceptance) is printed beside the measurement, and its target "
                     "unless --target is given."),
        click.option("--gpu", metavar="NAME|FILE", help="The hardware of the prediction (a catalogue name, or a "
                     "'hw probe' file of the server's machine) instead of the recipe's."),
        click.option("--serves-drafter", metavar="TYPE", help="What the server drafts with (a drafter type, e.g. "
                     "ngram, eagle3), as you started it: recorded, checked against every source that counts drafts "
                     "(the engine's counters, the responses' per-request blocks), and what 'plan --calibrate' reads "
                     "the file as. Give it with "
                     "--serves-draft-len."),
        click.option("--serves-draft-len", type=int, metavar="D", help="The draft length the server runs (0: the "
                     "target alone, no --serves-drafter); needed for 'plan --calibrate' to read the file."),
    )(f)
