"""The process behind the Triton preview's ``model.py`` (``trtllm-spec triton --preview reference``): the bundle's
target and drafter in our reference decoder (``runtime/``), speaking JSON lines on stdin/stdout.

The python backend's stub runs ``model.py`` in the Triton venv (numpy < 2, no torch), so the model itself is not
loaded there: ``model.py`` starts ``<our python> -m trtllm_spec.deploy.triton_worker --bundle B`` and forwards
requests. Protocol (one JSON object a line):

- worker -> model.py, once: ``{"ready": true, "drafter": ..., "draft_len": D}`` or ``{"error": "..."}``;
- model.py -> worker: ``{"id": N, "text": str, "max_tokens": int, "temperature": float, "top_k": int,
  "top_p": float, "seed": int, "stop": [str], "stream": bool}``; ``{"cancel": N}`` when request N's client went
  away (or sent a ``stop``): the worker ends it at its next decoding step (``{"id": N, "error": ..., "final": true,
  "cancelled": true}``), or skips it if it has not started; requests queue behind the one decoding;
- worker -> model.py, per decoding step when streaming, else once: ``{"id": N, "text": <all text so far>,
  "tokens": n, "final": bool, "finish_reason": "length"|"stop"|null, "stop_reason": str|null,
  "accepted": a, "drafted": d, "first_token_ns": t, "last_token_ns": t}``; a bad request gets
  ``{"id": N, "error": "...", "final": true}``.

The prompt is the raw ``text_input`` tokenized with the tokenizer's special tokens (what the LLM API does with a
string prompt, no chat template), and the text decoded without special tokens (its ``skip_special_tokens``
default). Greedy output equals target-only greedy: the decoder verifies every draft against the target.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

from trtllm_spec.errors import UserError


class _Stop(Exception):
    """Ends a request's decoding from a step callback (a stop string was generated)."""


class _Cancelled(_Stop):
    """Ends a request's decoding from a step callback (model.py cancelled it: its client went away)."""


class _StepTap:
    """Wraps the runtime drafter: ``reset`` and ``commit`` see every decoding step's new tokens, so a streamed
    response goes out per step without changing the decoder."""

    def __init__(self, inner, on_tokens):
        self.inner, self.on_tokens = inner, on_tokens
        self.drafted = 0
        self.capture = inner.capture
        self.max_draft_len = getattr(inner, "max_draft_len", None)

    def reset(self, prompt, first_token, aux):
        self.inner.reset(prompt, first_token, aux)
        self.on_tokens([first_token])

    def propose(self, n):
        drafts, q = self.inner.propose(n)
        self.drafted += len(drafts)
        return drafts, q

    def commit(self, verified, next_token, aux):
        self.on_tokens([*verified[1:], next_token])
        self.inner.commit(verified, next_token, aux)

    def end_request(self, prompt, output):
        self.inner.end_request(prompt, output)

    def __getattr__(self, name):  # last_source and the like
        return getattr(self.inner, name)


def load_bundle(bundle: Path) -> dict:
    """What the reference decoder needs from a bundle, from its record (``core.bundle.read_bundle``: verified
    against its manifest): the target folder, the drafter spec (the drafter folder the options name, spelled per
    release) and its runtime options, D from the options Triton's ``model.yaml`` carries (``llm_api_options.yaml``;
    none there: target-only decoding)."""
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.drafters.registry import get

    record = read_bundle(bundle, "bundle")
    target = record.target_dir
    if target is None:
        raise UserError(f"the preview runs the target's weights from the bundle, but {record.served!r} is not a folder "
                        f"of {bundle} (an HF id: the bundle references the model rather than carrying it)")
    options = record.main_options
    spec_cfg = options.get("speculative_config") or {}
    mechanism = get(record.drafter)
    spec = mechanism.measure_spec(record.drafter_dir) if spec_cfg else None
    if spec_cfg and spec is None:
        named = f" (the options name {record.drafter_model!r})" if record.drafter_model else ""
        raise UserError(f"the bundle's {record.drafter} drafter has no folder in {bundle}{named}: the reference "
                        "preview needs its weights (a deferred stage, a hub id, or a target's native layers the "
                        "reference decoder does not run)")
    recipe = record.recipe_model()
    return {"target": target, "drafter": spec, "draft_len": int(spec_cfg.get("max_draft_len") or 0),
            "options": mechanism.runtime_options(recipe.drafter, int(options.get("max_batch_size") or 1)) or None,
            "kind": record.drafter if spec_cfg else "none"}


class Engine:
    def __init__(self, bundle: Path, device: str = "cpu"):
        import torch

        from trtllm_spec.data.chat import load_tokenizer
        from trtllm_spec.drafters.load import load_runtime_drafter
        from trtllm_spec.runtime.targets import load_target

        info = load_bundle(bundle)
        self.info = info
        cfg = json.loads((info["target"] / "config.json").read_text())
        _, self.target = load_target(info["target"], cfg, "auto", torch.float32, device)
        self.tok = load_tokenizer(info["target"])
        self.max_positions = int(cfg.get("max_position_embeddings") or 4096)
        self.drafter = None
        if info["drafter"]:
            _, self.drafter = load_runtime_drafter(info["drafter"], self.target, options=info["options"],
                                                   max_len=self.max_positions)
        eos = list(self.target.cfg.eos_token_ids)
        if getattr(self.tok, "eos_token_id", None) is not None and self.tok.eos_token_id not in eos:
            eos.append(self.tok.eos_token_id)
        self.eos = tuple(eos)

    def run(self, req: dict, emit, cancelled=None) -> None:
        """Decode one request, ``emit``-ing its events; ``cancelled()`` is asked at every decoding step (True: end
        the request with a ``cancelled`` error event)."""
        import torch

        from trtllm_spec.runtime.decoder import speculative_generate
        from trtllm_spec.runtime.sampling import SamplingParams

        text = req.get("text")
        if not isinstance(text, str) or not text:
            raise UserError("text_input is empty: send one non-empty prompt string")
        max_tokens = int(req.get("max_tokens", 32))
        if max_tokens < 1:
            raise UserError(f"sampling_param_max_tokens {max_tokens} must be >= 1")
        ids = self.tok(text).input_ids
        if not ids:
            raise UserError(f"text_input {text[:40]!r} tokenizes to no tokens: send a prompt with some text")
        if len(ids) + max_tokens + self.info["draft_len"] + 2 > self.max_positions:
            raise UserError(f"prompt ({len(ids)} tokens) + sampling_param_max_tokens {max_tokens} exceed the "
                            f"target's {self.max_positions} positions")
        params = SamplingParams(temperature=float(req.get("temperature", 0.0)), top_k=int(req.get("top_k", 0)),
                                top_p=float(req.get("top_p", 1.0)))
        if params.temperature < 0 or params.top_k < 0 or not 0 < params.top_p <= 1:
            raise UserError(f"sampling_param_temperature {params.temperature} (>= 0), sampling_param_top_k "
                            f"{params.top_k} (>= 0) and sampling_param_top_p {params.top_p} (in (0, 1]) are out of range")
        gen = torch.Generator().manual_seed(int(req.get("seed", 0)))
        stops = [s for s in req.get("stop") or [] if s]
        stream = bool(req.get("stream"))
        out: list[int] = []
        state = {"accepted": 0, "drafted": 0, "first": None, "stopped": None}
        drafter = _StepTap(self.drafter, lambda new: on_tokens(new)) if self.drafter is not None else None

        def text_of(tokens: list[int]) -> str:
            return self.tok.decode(tokens, skip_special_tokens=True)

        def on_tokens(new: list[int]) -> None:
            if cancelled is not None and cancelled():
                raise _Cancelled
            now = time.time_ns()
            state["first"] = state["first"] or now
            if out:
                state["accepted"] += len(new) - 1
            state["drafted"] = drafter.drafted if drafter is not None else 0
            out.extend(new)
            if stops:
                t = text_of(out)
                hit = min(((t.find(s), s) for s in stops if s in t), default=None)
                if hit:
                    state["stopped"] = hit
                    raise _Stop
            if stream:
                emit({"text": text_of(out), "tokens": len(out), "final": False, **self._stats(state, now)})

        if drafter is not None:
            try:
                final, stats = speculative_generate(self.target, drafter, ids, max_tokens, self.info["draft_len"],
                                                    params, self.eos, gen)
                state["drafted"] = sum(stats.proposed)
                state["accepted"] = sum(stats.accepted)
            except _Stop as exc:
                final, state["cancelled"] = list(out), isinstance(exc, _Cancelled)
            drafter.end_request(ids, final)
        else:  # no speculation in the bundle: target-only decoding, one token per step
            final = []
            try:
                for tok in _target_steps(self.target, ids, max_tokens, self.eos, params, gen):
                    final.append(tok)
                    on_tokens([tok])
            except _Stop as exc:
                final, state["cancelled"] = list(out), isinstance(exc, _Cancelled)
        if state.get("cancelled"):
            emit({"error": f"request cancelled by the client after {len(final)} tokens", "final": True,
                  "cancelled": True})
            return
        text = text_of(final)
        reason, stop_reason = ("length", None)
        if state["stopped"]:
            pos, s = state["stopped"]
            text, reason, stop_reason = text[:pos], "stop", s
        elif final and final[-1] in self.eos:
            reason = "stop"
            stop_reason = None
        emit({"text": text, "tokens": len(final), "final": True, "finish_reason": reason, "stop_reason": stop_reason,
              **self._stats(state, time.time_ns())})

    @staticmethod
    def _stats(state: dict, now: int) -> dict:
        return {"accepted": state["accepted"], "drafted": state["drafted"], "first_token_ns": state["first"],
                "last_token_ns": now}


def _target_steps(target, ids, max_tokens, eos, params, gen):
    """Target-only decoding yielding token by token: the loop of ``runtime.generate.generate``."""
    import torch

    from trtllm_spec.runtime.sampling import sample

    dev = target.device
    cache = target.new_cache(1, len(ids) + max_tokens + 1)
    logits, _, _ = target.forward(torch.tensor([ids], device=dev), torch.tensor([0], device=dev), cache,
                                  logits="last")

    pos, n = len(ids), 0
    while n < max_tokens:
        tok = sample(logits[0, -1], params, gen)
        n += 1
        yield tok
        if tok in eos or n >= max_tokens:
            return
        logits, _, _ = target.forward(torch.tensor([[tok]], device=dev), torch.tensor([pos], device=dev), cache,
                                      logits="last")
        pos += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trtllm_spec.deploy.triton_worker")
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:  # as the CLI (cli/common.short_omp_spin):
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # idle OpenMP threads sleep soon on a shared machine
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr (Triton's log), never into the protocol
    sys.stdout = sys.stderr

    def send(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        engine = Engine(args.bundle.resolve())
    except Exception as exc:  # noqa: BLE001 (reported to model.py, which fails the model load with it)
        send({"error": f"{type(exc).__name__}: {exc}" if not isinstance(exc, UserError) else str(exc)})
        return 2
    send({"ready": True, "drafter": engine.info["kind"], "draft_len": engine.info["draft_len"]})
    requests: queue.Queue = queue.Queue()
    cancelled: set = set()

    def read() -> None:
        """stdin -> the request queue; a cancellation is noted at once, even while a request decodes."""
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if not isinstance(msg, dict):
                requests.put({"id": None, "error": "not a JSON request line"})
            elif "cancel" in msg:
                cancelled.add(msg["cancel"])
            else:
                requests.put(msg)
        requests.put(None)  # model.py closed the pipe: finish

    threading.Thread(target=read, daemon=True).start()
    while (req := requests.get()) is not None:
        rid = req.get("id")
        if req.get("error"):
            send({"id": rid, "error": req["error"], "final": True})
            continue
        try:
            if rid in cancelled:  # cancelled while it waited
                send({"id": rid, "error": "request cancelled by the client before it started", "final": True,
                      "cancelled": True})
                continue
            engine.run(req, lambda ev, rid=rid: send({"id": rid, **ev}), cancelled=lambda rid=rid: rid in cancelled)
        except (UserError, ValueError, TypeError, OverflowError) as exc:
            send({"id": rid, "error": str(exc), "final": True})
        except Exception as exc:  # noqa: BLE001 (the request fails with its reason; the worker keeps serving)
            send({"id": rid, "error": f"{type(exc).__name__}: {exc}", "final": True})
        finally:
            cancelled.discard(rid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
