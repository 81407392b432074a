"""'trtllm-spec doctor' for an EAGLE-3 export: config keys, tensor names and shapes against the target (fc = 3 x
target hidden), captured layer ids in range, d2t range and uniqueness, and train/serve parity: first-step accuracy
recomputed with the *deployment* semantics (drafters/eagle3/runtime.py) on the held-out chunks training scored,
against the recorded held-out accuracy (also EAGLE-MTP's: drafters/eagle_mtp/doctor.py). torch is imported here
only, when doctor runs."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trtllm_spec.core.artifacts import HELDOUT_FILE
from trtllm_spec.drafters.base import Finding
from trtllm_spec.errors import UserError


def static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    from trtllm_spec.drafters.eagle3.convert import check_drafter

    out = []
    if cfg.get("architectures") != ["LlamaForCausalLMEagle3"]:
        out.append(Finding("warning", "config", f"architectures {cfg.get('architectures')}; TensorRT-LLM expects "
                                                "['LlamaForCausalLMEagle3']"))
    for key, tkey in (("hidden_size", "hidden_size"), ("vocab_size", "vocab_size")):
        if cfg.get(key) != target.get(tkey):
            out.append(Finding("error", "target", f"drafter {key} {cfg.get(key)} != target {tkey} {target.get(tkey)}: "
                                                  "the drafter belongs to another target"))
    try:
        check_drafter(cfg, tensors, "drafter")
        out.append(Finding("ok", "layout", "tensor names and shapes match config.json (fc takes 3 x target hidden)"))
    except UserError as exc:
        out.append(Finding("error", "layout", str(exc)))
    n = target.get("num_hidden_layers", 0)
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []
    if any(not 0 <= i < n for i in ids):
        out.append(Finding("error", "layers", f"captured target layers {ids} out of range for {n} target layers"))
    else:
        out.append(Finding("ok", "layers", f"captured target layers {ids or 'default'} within 0..{n - 1}"))
    out += d2t_findings(cfg, tensors)
    return out


def d2t_findings(cfg: dict, tensors: dict) -> list[Finding]:
    from trtllm_spec.data.vocab import check_d2t

    dv, vocab = cfg.get("draft_vocab_size"), cfg.get("vocab_size")
    if "d2t" in tensors:
        problems = check_d2t(tensors["d2t"].tolist(), vocab)
        return [Finding("error", "d2t", "; ".join(problems)) if problems else
                Finding("ok", "d2t", f"{dv} draft ids map to distinct target ids in range")]
    if dv != vocab:
        return [Finding("error", "d2t", f"draft_vocab_size {dv} < vocab {vocab} but no d2t table")]
    return []


def lm_head_check(drafter_lm: torch.Tensor | None, d2t: torch.Tensor | None, target_lm: torch.Tensor) -> Finding:
    if drafter_lm is None:
        return Finding("ok", "lm_head", "no lm_head: TensorRT-LLM uses the target's")
    ids = torch.arange(drafter_lm.shape[0]) + (d2t if d2t is not None else 0)
    ref = target_lm[ids].float()
    cos = torch.nn.functional.cosine_similarity(drafter_lm.float(), ref, dim=-1).mean().item()
    if d2t is None and torch.allclose(drafter_lm.float(), ref, atol=1e-2, rtol=1e-2):
        return Finding("ok", "lm_head", "lm_head is the target's")
    if cos < 0.05:
        return Finding("warning", "lm_head", f"lm_head rows barely resemble the target's (mean cosine {cos:.3f}): "
                                             "random or for another target?")
    return Finding("ok", "lm_head", f"lm_head rows follow the target's (mean cosine {cos:.3f})")


def first_step_counts(target, drafter, ids: list[int], scored: list[int]) -> tuple[int, int, int, int]:
    """Teacher-forced first draft step of an EAGLE-3 ``drafter`` over the tokens j of ``ids`` with ``scored[j]``
    (each predicted from position j - 2: the target's features there and the embedding of token j - 1):
    (proposals equal to the target's greedy token, i.e. accepted; proposals equal to the target's best token
    inside the draft vocabulary, the metric training reports; greedy tokens the draft vocabulary holds; tokens)."""
    cache, dev = target.new_cache(1, len(ids) + 1), target.device
    logits, aux, _ = target.forward(torch.tensor([ids], device=dev), torch.tensor([0], device=dev), cache,
                                    capture=drafter.capture)
    draft = drafter.teacher_forced(ids, aux)  # position t predicts token t + 2
    vocab_ids = torch.arange(draft.shape[-1], device=dev) + (drafter.d2t if drafter.d2t is not None else 0)
    greedy = logits[0].argmax(-1)[1:]  # token t + 2 as the target chooses it at position t + 1
    best_inside = logits[0][:, vocab_ids].argmax(-1)[1:]
    prop = draft.argmax(-1)
    mask = torch.tensor([*scored[2:], 0], dtype=torch.bool, device=dev)
    return (int((vocab_ids[prop] == greedy)[mask].sum()), int((prop == best_inside)[mask].sum()),
            int(torch.isin(greedy, vocab_ids)[mask].sum()), int(mask.sum()))


def parity(drafter_dir: Path, target_dir: Path, heldout: Path | None, tol: float, placement=None) -> Finding:
    from trtllm_spec.core.artifacts import read_meta
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel

    meta = read_meta(drafter_dir)
    recorded = (meta.get("training") or {}).get("heldout_acc")
    path = heldout or drafter_dir.parent / HELDOUT_FILE
    if not recorded or not path.is_file():
        return Finding("info", "parity", "no recorded held-out accuracy and chunks next to the drafter; parity "
                                         f"not checked (expected {path})")
    chunks = json.loads(path.read_text())
    dev, dt = (placement.device, placement.torch_dtype(torch)) if placement else ("cpu", torch.float32)
    target = LlamaModel.from_pretrained(target_dir, dtype=dt, device=dev)
    drafter = Eagle3Drafter(drafter_dir, target)
    hit = total = 0
    for c in chunks:  # loss_mask[j] gates token j + 1
        _, within, _, n = first_step_counts(target, drafter, c["input_ids"], [0, *c["loss_mask"][:-1]])
        hit, total = hit + within, total + n
    acc = hit / max(total, 1)
    lm = lm_head_check(drafter.lm_head if drafter.lm_head is not target.lm_head else None, drafter.d2t,
                        target.lm_head)
    diff = acc - recorded[0]
    msg = (f"first-step accuracy on {len(chunks)} held-out chunks: {acc:.3f} reading the export as deployed vs "
           f"{recorded[0]:.3f} recorded in training ({lm.message})")
    if abs(diff) > tol:
        return Finding("error", "parity", msg + f": differs by {diff:+.3f} (> {tol}); the exported drafter does not "
                                                "compute what was trained")
    return Finding("ok", "parity", msg)
