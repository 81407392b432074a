"""Run llama.cpp's ``convert_hf_to_gguf.py`` (from a build's ``convert/`` folder) as a script, in a child process:

    python convert_runner.py CONVERT_DIR (gpt2|auto) -- CONVERTER_ARGS...

``gpt2``: the model's tokenizer.json is a byte-level BPE (GPT-2 style, e.g. SmolLM2); the converter's Llama
vocabulary chain tries SentencePiece, then its Llama-HF reader, before GPT-2 BPE, and with ``sentencepiece``
installed the Llama-HF reader writes an SPM vocabulary for such a tokenizer, which llama.cpp then aborts on
(ggml-org/llama.cpp 0c1e5709, vendored in llama-cpp-python 0.3.36: ``conversion/llama.py``, seen on SmolLM2).
The first two readers are made to report "not this format" (the FileNotFoundError the
chain already catches), so the converter takes its own GPT-2 path. Nothing else of the converter is changed.
Never imported by the package: it runs in the child only.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    convert_dir, vocab, sep, *args = argv
    if sep != "--" or vocab not in ("gpt2", "auto"):
        raise SystemExit("usage: convert_runner.py CONVERT_DIR (gpt2|auto) -- ARGS...")
    sys.path[0:1] = [convert_dir, str(Path(convert_dir) / "gguf-py")]  # not this script's folder
    import convert_hf_to_gguf

    if vocab == "gpt2":
        from conversion import base

        def not_this_format(self, *_a, **_k):
            raise FileNotFoundError("byte-level BPE tokenizer: GPT-2 vocabulary (trtllm-spec convert_runner)")

        base.TextModel._set_vocab_sentencepiece = not_this_format
        base.TextModel._set_vocab_llama_hf = not_this_format
    sys.argv = [str(Path(convert_dir) / "convert_hf_to_gguf.py"), *args]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main(sys.argv[1:])
