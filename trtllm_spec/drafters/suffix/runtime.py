"""Suffix decoding with a suffix automaton, following TensorRT-LLM's SA semantics (sources on
``trtllm_spec.drafters.suffix``; this is our own implementation of the textbook online construction).

- Own text (prompt + verified tokens): the longest suffix that occurred before, found by walking suffix links
  from the whole text's state to the first state whose first occurrence ends before the last token; the
  drafts are the tokens after that first occurrence, up to D (fewer at the end of the text). With
  ``max_matching_ngram_size = k > 0``: the first size from k down to 1 with such an occurrence.
- Global pool (``enable_global_pool``): the automata of the other requests are searched as well, matching the
  last <= 64 tokens of the request (TensorRT-LLM caps pool matching at 64). Here (``measure``, one request at
  a time) the pool is the suite's earlier requests, prompt + output, in suite order, at most ``pool_slots - 1``
  of them (the request itself holds a slot; the oldest is evicted first), so a result never depends on batch
  order. The longest match wins; on equal length the request's own text, then the most recent request (our
  rule: the upstream cross-slot kernel was not among the files read).

Each automaton is extended one token at a time (amortised O(1)); the pool keeps, per pooled text, the matching
state of the request's growing suffix, so each new token costs O(1) per pooled text, not a re-scan.
"""

from __future__ import annotations

import torch

from trtllm_spec.core.sa import SA_POOL_DEFAULT_SLOTS, SA_POOL_MATCH_CAP
from trtllm_spec.runtime.decoder import Drafter


class SuffixAutomaton:
    """Online suffix automaton of one token stream: ``length``, ``link`` and first-occurrence end ``first`` per
    state (a clone keeps the first occurrence of the state it splits), transitions in dicts."""

    def __init__(self, tokens: list[int] | None = None) -> None:
        self.tokens: list[int] = []
        self.length, self.link, self.first = [0], [-1], [-1]
        self.next: list[dict[int, int]] = [{}]
        self.last = 0
        for t in tokens or ():
            self.extend(t)

    def extend(self, tok: int) -> None:
        self.tokens.append(tok)
        cur = self._new(self.length[self.last] + 1, len(self.tokens) - 1, {})
        p = self.last
        while p != -1 and tok not in self.next[p]:
            self.next[p][tok] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][tok]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new(self.length[p] + 1, self.first[q], dict(self.next[q]))
                self.link[clone] = self.link[q]
                while p != -1 and self.next[p].get(tok) == q:
                    self.next[p][tok] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def _new(self, length: int, first: int, nxt: dict[int, int]) -> int:
        self.length.append(length)
        self.link.append(-1)
        self.first.append(first)
        self.next.append(nxt)
        return len(self.length) - 1

    def _min_len(self, state: int) -> int:
        return self.length[self.link[state]] + 1 if self.link[state] > 0 else 1

    def own_match(self, max_ngram: int, cap: int | None = None) -> tuple[int, int]:
        """(match length, continuation start) of the text's longest suffix (k > 0: of size k..1) whose first
        occurrence ends before the last token; (0, -1) when there is none. ``cap``: lengths count at most that."""
        n = len(self.tokens)
        if max_ngram > 0:
            for size in range(min(max_ngram, n - 1), 0, -1):
                s = self.last
                while s > 0 and self._min_len(s) > size:  # the state holding the suffix of this size
                    s = self.link[s]
                if s > 0 and self.first[s] < n - 1:
                    return size, self.first[s] + 1
            return 0, -1
        s = self.last
        while s > 0 and self.first[s] >= n - 1:  # the whole text's state (and any ending only here): no earlier one
            s = self.link[s]
        if s <= 0:
            return 0, -1
        length = self.length[s]
        if cap is not None and length > cap:
            while self.link[s] > 0 and self.length[self.link[s]] >= cap:
                s = self.link[s]
            length = cap
        return length, self.first[s] + 1

    def draft(self, start: int, n: int) -> list[int]:
        return self.tokens[start:start + n]


class PoolMatcher:
    """Matching statistics of the request's growing token stream against one pooled (finished) text: the state
    and length of its longest suffix that occurs in that text, updated per appended token."""

    def __init__(self, sam: SuffixAutomaton) -> None:
        self.sam, self.state, self.length = sam, 0, 0

    def feed(self, tok: int) -> None:
        sam = self.sam
        while self.state > 0 and tok not in sam.next[self.state]:
            self.state = sam.link[self.state]
            self.length = sam.length[self.state]
        if tok in sam.next[self.state]:
            self.state, self.length = sam.next[self.state][tok], self.length + 1
        else:
            self.state, self.length = 0, 0

    def match(self, max_ngram: int, cap: int) -> tuple[int, int]:
        """(length, continuation start) of the longest suffix (<= ``cap``; k > 0: <= k) with a continuation in the
        pooled text; (0, -1) when none."""
        sam, s = self.sam, self.state
        length = min(self.length, cap, max_ngram if max_ngram > 0 else cap)
        end = len(sam.tokens) - 1
        while s > 0:
            while sam.link[s] > 0 and sam.length[sam.link[s]] >= length:  # the state of the capped suffix
                s = sam.link[s]
            if sam.first[s] < end:  # it continues in that text
                return length, sam.first[s] + 1
            s = sam.link[s]  # only at the very end of that text: a shorter suffix
            length = sam.length[s]
        return 0, -1


class SuffixDrafter(Drafter):
    """Standalone SA drafting for the reference decoder (``Drafter`` protocol plus ``end_request`` for the pool)."""

    def __init__(self, max_matching_ngram_size: int = -1, enable_global_pool: bool = False,
                 pool_slots: int | None = None) -> None:
        if max_matching_ngram_size == 0 or max_matching_ngram_size < -1:
            raise ValueError(f"max_matching_ngram_size {max_matching_ngram_size}: -1 or k > 0")
        self.k = max_matching_ngram_size
        self.enable_global_pool = enable_global_pool
        self.pool_slots = max(1, pool_slots or SA_POOL_DEFAULT_SLOTS)
        self.pool: list[SuffixAutomaton] = []  # finished requests, oldest first
        self.sam = SuffixAutomaton()
        self.matchers: list[PoolMatcher] = []
        self.last_match = (0, "none")  # (length, "own" | "pool" | "none") of the last proposal

    # ---- the pool (measure calls end_request after each suite prompt, in suite order) --------------------
    def end_request(self, prompt: list[int], output: list[int]) -> None:
        if not self.enable_global_pool:
            return
        self.pool.append(SuffixAutomaton([*prompt, *output]))
        del self.pool[:max(0, len(self.pool) - (self.pool_slots - 1))]  # the running request holds one slot

    def clear_pool(self) -> None:
        self.pool = []

    # ---- Drafter protocol -----------------------------------------------------------------------------------
    def _append(self, tok: int) -> None:
        self.sam.extend(tok)
        for m in self.matchers:
            m.feed(tok)

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        self.sam = SuffixAutomaton()
        self.matchers = [PoolMatcher(p) for p in self.pool] if self.enable_global_pool else []
        for t in [*prompt, first_token]:
            self._append(t)

    def match(self, n: int) -> tuple[int, list[int]]:
        """(match length, up to ``n`` drafts) of the best source; (0, []) when nothing matches."""
        cap = SA_POOL_MATCH_CAP if self.enable_global_pool else None
        length, start = self.sam.own_match(self.k, cap)
        best, drafts, where = length, self.sam.draft(start, n) if length else [], "own" if length else "none"
        for m in reversed(self.matchers):  # most recent first; a pooled text must match strictly longer
            plen, pstart = m.match(self.k, SA_POOL_MATCH_CAP)
            if plen > best:
                best, drafts, where = plen, m.sam.draft(pstart, n), "pool"
        self.last_match = (best, where)
        return best, drafts

    def propose(self, n: int) -> tuple[list[int], None]:
        return self.match(n)[1], None

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        for t in verified[1:]:
            self._append(t)
        self._append(next_token)
