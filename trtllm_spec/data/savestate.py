"""Reading TensorRT-LLM's ``SaveState`` hidden-state dumps as offline EAGLE-3 training features.

The format, from NVIDIA/TensorRT-LLM at commit 3e906a0ed7c66ed4df90aa4856bf1a6c98ca7df6,
``tensorrt_llm/_torch/speculative/save_hidden_state.py`` (``SaveHiddenStatesDrafter._process_request`` /
``_write_to_file``) and ``tensorrt_llm/llmapi/llm_args.py`` (``SaveHiddenStatesDecodingConfig``, YAML
``decoding_type: SaveState``): every ``write_interval`` requests the engine writes ``torch.save(list)`` to
``{output_directory}/{file_prefix}_{iter}.pt``; each element is a dict with ``"id"`` (the engine's request counter,
1-based, not the conversation's id), ``"input_ids"`` (int64 [T]: the tokens the target read), ``"hidden_state"``
([T, H]: the last block of the capture buffer, the final post-norm state, since the config adds layer -1) and,
with more than one captured layer, ``"aux_hidden_states"`` ([T, n*H]: the captured layers; ([T, (n+1)*H]) with the
post-norm block last when the user listed -1 among ``eagle3_layers_to_capture``). Files hold tensors only, so they
load with ``torch.load(weights_only=True)``.

Because the ids are request counters, records are matched to conversations by their tokens: a record belongs to the
conversation whose token ids it starts with (the engine may append the one token it generated); the assistant
mask is the conversation's own. The bundle's ``features_savestate.sh`` writes such files on a GPU node (deferred
here: TensorRT-LLM does not run on this machine).
"""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.errors import UserError


def read_savestate(folder: Path) -> list[tuple[Path, dict]]:
    """(file, record) for every record of every ``*.pt`` file in ``folder`` (in write order)."""
    import torch

    files = sorted(folder.glob("*.pt"), key=lambda p: (p.stem.rsplit("_", 1)[0], _iter_of(p)))
    if not files:
        raise UserError(f"{folder}: no SaveState files (*.pt, written by TensorRT-LLM with decoding_type: SaveState)")
    out = []
    for p in files:
        try:
            recs = torch.load(str(p), weights_only=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - pickle/zip errors have no common base
            raise UserError(f"{p}: not a SaveState file torch.load(weights_only=True) can read "
                            f"({str(exc).splitlines()[0][:120]})") from None
        if not isinstance(recs, list) or not all(isinstance(r, dict) and "input_ids" in r and "hidden_state" in r
                                                 for r in recs):
            raise UserError(f"{p}: expected a list of {{id, input_ids, hidden_state[, aux_hidden_states]}} dicts "
                            "(TensorRT-LLM SaveState output)")
        out += [(p, r) for r in recs]
    return out


def _iter_of(p: Path) -> int:
    tail = p.stem.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class SaveStateSet:
    """SaveState records as features of ``seqs`` (id -> (ids, mask)); same ``get`` as ``features.FeatureSet``."""

    def __init__(self, folder: Path, seqs: dict[str, tuple[list[int], list[int]]], layers: tuple[int, ...],
                 hidden_size: int):
        self.folder, self.seqs = folder, seqs
        by_tokens = {tuple(ids): cid for cid, (ids, _) in seqs.items()}
        self.records: dict[str, dict] = {}
        n = len(layers)
        for path, rec in read_savestate(folder):
            ids = rec["input_ids"].tolist()
            cid = by_tokens.get(tuple(ids)) or by_tokens.get(tuple(ids[:-1]))
            if cid is None:
                continue  # a prompt of another data set in the same dump: not ours to train on
            hidden = rec["hidden_state"]
            aux = rec.get("aux_hidden_states", hidden if n == 1 else None)
            if aux is None or hidden.shape[-1] != hidden_size:
                raise UserError(f"{path} (id {rec.get('id')}): hidden_state is {tuple(hidden.shape)} and "
                                f"aux_hidden_states {None if aux is None else tuple(aux.shape)}, but the target's "
                                f"hidden size is {hidden_size} with {n} captured layers")
            if aux.shape[-1] == (n + 1) * hidden_size:  # -1 was listed: the post-norm block comes last
                aux = aux[..., :-hidden_size]
            if aux.shape[-1] != n * hidden_size:
                raise UserError(f"{path} (id {rec.get('id')}): aux_hidden_states has {aux.shape[-1]} columns, "
                                f"{n} captured layers x {hidden_size} = {n * hidden_size} expected; dump with "
                                f"eagle3_layers_to_capture = {list(layers)} (drafter.layers_to_capture)")
            self.records[cid] = {"aux": aux, "hidden": hidden}

    def get(self, cid: str):
        rec = self.records.get(cid)
        if rec is None:
            raise UserError(f"{self.folder}: no SaveState record holds the tokens of conversation {cid!r}; dump "
                            "every training conversation (prompt + reply as the input) with TensorRT-LLM SaveState")
        ids, mask = self.seqs[cid]
        t = len(ids)
        return ids, mask, rec["aux"][:t].float(), rec["hidden"][:t].float()


def open_features(folder: Path, seqs: dict, spec):
    """Our ``data features`` folder (index*.json) or a SaveState dump (*.pt), by what ``folder`` holds."""
    from trtllm_spec.data.features import FeatureSet

    if not folder.is_dir():
        raise UserError(f"features folder {folder} does not exist; compute it with 'trtllm-spec data features "
                        "RECIPE' or point drafter.training.data.features_path at a SaveState dump")
    if any(folder.glob("index*.json")):
        return FeatureSet(folder, spec)
    if any(folder.glob("*.pt")):
        return SaveStateSet(folder, seqs, spec.layers, spec.hidden_size)
    raise UserError(f"{folder}: neither a 'data features' folder (index*.json) nor a TensorRT-LLM SaveState dump "
                    "(*.pt)")
