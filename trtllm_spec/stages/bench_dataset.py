"""The bundle's own benchmark dataset (``dataset.jsonl``) and the ``max_seq_len`` it needs.

What TensorRT-LLM does with it (docs/trtllm_compat.md, "Benchmark dataset"):

- ``trtllm-bench`` sends a request's ``input_ids`` as they are when the line carries them, and otherwise
  tokenizes ``prompt`` as plain text with the model's tokenizer (``tokenizer(prompt)["input_ids"]``: special
  tokens such as BOS added, **no chat template**): ``tensorrt_llm/bench/utils/data.py``
  ``create_dataset_from_stream`` and ``bench/dataclasses/general.py`` ``InferenceRequest``.
- It applies ``--extra_llm_api_options`` after its dataset-derived defaults, so the options' ``max_seq_len``
  is the limit; the LLM API refuses a request whose prompt leaves no room under ``max_seq_len`` and clips the
  others (``_deduce_max_tokens``).

So, with a local tokenizer (a target folder or fetched asset), every request carries ``input_ids``: the chat
template applied to the suite's messages exactly as ``measure`` applies it (``data.chat.prompt_ids``), so the
engine is benchmarked on the prompts acceptance was measured on and the count is exact. Without one (a shape
preset or an HF id: nothing to tokenize with here), the request carries the text only and its count is an
upper bound, ``UTF-8 bytes + SPECIAL_TOKENS_BOUND``: every token of a byte-level BPE vocabulary (GPT-2,
Llama 3, Qwen, tiktoken's o200k) or of a byte-fallback SentencePiece one covers at least one byte of the
input, except the special tokens the tokenizer adds (BOS/EOS) and SentencePiece's dummy-prefix piece.

``max_seq_len``: the recipe's ``engine.max_seq_len`` when set (every request must then fit, or the build
stops naming the prompt and the fix), else ``max(isl + osl, longest request) + D + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtllm_spec.errors import UserError

SPECIAL_TOKENS_BOUND = 8  # BOS/EOS and SentencePiece's leading piece, with room to spare
FALLBACK_PROMPT = "Explain speculative decoding in three sentences."


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_tokens: int  # exact with a tokenizer, else an upper bound (see the module docstring)
    output_tokens: int
    input_ids: tuple[int, ...] | None = None
    id: str = ""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class BenchDataset:
    requests: tuple[BenchRequest, ...]
    counted: str  # how prompt_tokens were counted, for the build summary

    @property
    def max_total_tokens(self) -> int:
        return max(r.total_tokens for r in self.requests)

    def jsonl(self) -> str:
        from trtllm_spec.deploy.scripts import bench_dataset_jsonl

        return bench_dataset_jsonl([r.prompt for r in self.requests], [r.output_tokens for r in self.requests],
                                   input_ids=[r.input_ids for r in self.requests])

    def summary(self) -> str:
        return (f"{len(self.requests)} requests, longest {self.max_total_tokens} tokens (prompt + output_tokens; "
                f"counted by {self.counted})")


def byte_bound(text: str) -> int:
    """An upper bound on the tokens any byte-level BPE / byte-fallback SentencePiece tokenizer makes of ``text``."""
    return len(text.encode("utf-8")) + SPECIAL_TOKENS_BOUND


def _prompt_ids(tokenizer, messages: list[dict]) -> tuple[int, ...]:
    """What the engine prefills: the chat template with the generation prompt, or, for a tokenizer without a
    template, the text as trtllm-bench itself would tokenize it."""
    if getattr(tokenizer, "chat_template", None):
        from trtllm_spec.data.chat import prompt_ids

        return tuple(prompt_ids(tokenizer, messages))
    return tuple(tokenizer(messages[-1]["content"])["input_ids"])


def build_dataset(items: list, output_tokens: int, tokenizer=None) -> BenchDataset:
    """Requests for suite ``items`` (``SuiteItem``s; an empty list gives the one fallback prompt)."""
    pairs = [(it.id, it.messages) for it in items] or [("fallback", [{"role": "user", "content": FALLBACK_PROMPT}])]
    out = []
    for rid, messages in pairs:
        text = messages[-1]["content"]
        if tokenizer is None:  # the text alone, which trtllm-bench tokenizes without a chat template
            out.append(BenchRequest(text, byte_bound(text), output_tokens, None, rid))
        else:
            ids = _prompt_ids(tokenizer, messages)
            out.append(BenchRequest(text, len(ids), output_tokens, ids, rid))
    return BenchDataset(tuple(out), "the target's tokenizer" if tokenizer is not None else
                        "UTF-8 bytes + special tokens, an upper bound: no tokenizer here")


def required_max_seq_len(dataset: BenchDataset, *, isl: int, osl: int, max_draft_len: int,
                         configured: int | None) -> int:
    """The options' ``max_seq_len``: ``configured`` if every request fits under it (else ``UserError``), or
    sized from the workload and the dataset with room for the draft tokens of one step."""
    if configured is None:
        return max(isl + osl, dataset.max_total_tokens) + max_draft_len + 1
    for r in dataset.requests:
        if r.total_tokens > configured:
            how = "tokens with the target's chat template" if r.input_ids is not None else (
                "tokens at most (UTF-8 bytes + special tokens: no tokenizer here to count exactly)")
            need = max(isl + osl, dataset.max_total_tokens) + max_draft_len + 1
            raise UserError(
                f"engine.max_seq_len = {configured}: benchmark prompt {r.id or 0} is {r.prompt_tokens} {how}, and with "
                f"output_tokens {r.output_tokens} needs {r.total_tokens}; TensorRT-LLM refuses or clips such a "
                f"request. Raise engine.max_seq_len to {need}, leave it unset (sized from the dataset), or use "
                "shorter prompts in measure.suite")
    return configured


def recipe_dataset(ctx) -> BenchDataset:
    """The bench dataset of the build in ``ctx``: the recipe's suite, tokenized where a tokenizer is here."""
    from trtllm_spec.data.user_suite import is_builtin, recipe_suite, select_suite

    m = ctx.recipe.measure
    try:
        items, _ = select_suite(recipe_suite(ctx.recipe), m.categories, m.num_prompts, m.seed)
    except UserError:
        if not is_builtin(m.suite):
            raise  # the user's own suite must be readable
        items = []  # the built-in prompts are not fetched here: one stand-in prompt
    return build_dataset(items, ctx.recipe.workload.osl, _local_tokenizer(ctx))


def _local_tokenizer(ctx):
    """The served target's tokenizer (with target.chat_template), or None when there is no local folder."""
    folder = ctx.served_target if ctx.served_target is not None else (ctx.target.path if ctx.target else None)
    if folder is None or not folder.is_dir() or not any(
            (folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from trtllm_spec.data.chat import load_tokenizer

    template = ctx.recipe.resolve_path(ctx.recipe.target.chat_template)
    try:
        return load_tokenizer(folder, template)
    except UserError as exc:
        if template is not None or "no chat template" not in str(exc):
            raise
    from transformers import AutoTokenizer  # a base model without a chat template: trtllm-bench's plain text

    return AutoTokenizer.from_pretrained(str(folder))
