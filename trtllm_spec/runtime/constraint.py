"""Structured output in the reference decoder: the request mode's JSON schema as token masks from ``xgrammar``
(PyPI; the guided-decoding backend TensorRT-LLM itself uses, ``guided_decoding_backend: xgrammar``), so the masks
are the deployment's.

A ``Matcher`` follows one generation: ``mask(logits)`` sets every token the grammar does not allow next to -inf,
``accept(token)`` advances it. The speculative decoder masks the target's logits at each verified position in turn
(the matcher advanced over the drafts accepted so far), so the output equals the constrained target-only output
and a draft outside the grammar is rejected (its masked probability is 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from trtllm_spec.errors import DependencyMissing, UserError


def _xgrammar():
    try:
        import xgrammar
    except ImportError:
        raise DependencyMissing("structured output (request_mode.response_format) needs xgrammar: pip install "
                                "'trtllm-spec[train]'") from None
    return xgrammar


@dataclass
class GrammarConstraint:
    """A compiled grammar for one tokenizer and vocabulary size (compile once, one ``matcher()`` per request)."""

    compiled: object
    vocab_size: int
    schema: dict

    @classmethod
    def from_schema(cls, tok, vocab_size: int, schema: dict, stop_ids: tuple[int, ...]) -> GrammarConstraint:
        xgr = _xgrammar()
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size, stop_token_ids=list(stop_ids))
        try:
            compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema))
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"response_format: xgrammar cannot compile this JSON schema ("
                            f"{' '.join(str(exc).split())[:200]}); simplify the schema") from None
        return cls(compiled, vocab_size, schema)

    def matcher(self) -> Matcher:
        xgr = _xgrammar()
        return Matcher(xgr, xgr.GrammarMatcher(self.compiled), xgr.allocate_token_bitmask(1, self.vocab_size))


class Matcher:
    """The grammar state of one generation."""

    def __init__(self, xgr, matcher, bitmask) -> None:
        self._xgr, self._m, self._bitmask = xgr, matcher, bitmask

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """A float32 copy of one position's logits with the tokens the grammar forbids next at -inf."""
        self._m.fill_next_token_bitmask(self._bitmask)
        out = logits.float().reshape(1, -1).clone().cpu()
        self._xgr.apply_token_bitmask_inplace(out, self._bitmask)
        return out[0].to(logits.device)

    def accept(self, token: int) -> None:
        if not self._m.accept_token(int(token)):
            raise RuntimeError(f"token {token} is outside the grammar (a masked choice cannot be)")

    @property
    def finished(self) -> bool:
        """The grammar ended (a stop token was accepted after a complete JSON value)."""
        return bool(self._m.is_terminated())
