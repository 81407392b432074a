"""``trtllm-spec measure``: acceptance of a drafter on real prompts -> speculation_profile.json + report."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main, parse_int_list


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _categories(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", "").split(",") if c]


def _input_files(target: Path | None, drafter: str | None) -> list[Path]:
    files: list[Path] = []
    for folder in (target, Path(drafter) if drafter and drafter != "ngram" else None):
        if folder is not None and folder.is_dir():
            files += sorted(p for p in folder.iterdir() if p.suffix in (".json", ".safetensors", ".jinja"))
    return files


@main.command("measure")
@click.option("--target", required=True, help="Target HF checkpoint folder or fetched asset (e.g. smollm2-135m).")
@click.option("--drafter", help="Exported drafter folder (EAGLE-3, EAGLE-1/MTP head, DFlash/DSpark), a draft model "
              "folder, or 'ngram'. With --engine trtllm the bundle's drafter is used.")
@click.option("--draft-len", type=int, help="D: drafts per target iteration (required with --engine pytorch).")
@click.option("--suite", default="speed-lite", show_default=True, help="Prompt suite.")
@click.option("--categories", help="Comma-separated suite categories (default: all).")
@click.option("--num-prompts", type=int, default=10, show_default=True, help="Prompts per category.")
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 = greedy (outputs compared).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "auto"]), default="fp32", show_default=True,
              help="Precision of the PyTorch reference run (auto: runtime/device.py's rule, bf16 where fast).")
@click.option("--seed", type=int, default=0, show_default=True, help="Suite selection and sampling seed.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the reference decoder runs (auto: CUDA when torch sees a GPU).")
@click.option("--chat-template", type=click.Path(path_type=Path), help="Jinja chat template, if the checkpoint lacks one.")
@click.option("--block-sweep", help="DFlash/DSpark: also measure these draft lengths, e.g. 1,2,4 (one run each).")
@click.option("--engine", type=click.Choice(["pytorch", "trtllm"]), default="pytorch", show_default=True,
              help="pytorch: the reference decoder here; trtllm: TensorRT-LLM's LLM API on a GPU node.")
@click.option("--bundle", type=click.Path(path_type=Path), help="With --engine trtllm: a 'trtllm-spec build' folder "
              "(its llm_api_options.yaml).")
@click.option("--out", type=click.Path(path_type=Path), help="Write speculation_profile.json, report.md, plots here.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--json", "as_json", is_flag=True, help="Print speculation_profile.json to stdout.")
def measure_cmd(target: str, drafter: str | None, draft_len: int | None, suite: str, categories: str | None,
                num_prompts: int, max_new_tokens: int, temperature: float, dtype: str, seed: int, device: str,
                chat_template: Path | None, block_sweep: str | None, engine: str, bundle: Path | None,
                out: Path | None, force: bool, as_json: bool) -> None:
    """Measure acceptance length (overall, per category, per draft position) and speedup of a drafter against
    its target on the speed-lite suite; the profile feeds 'trtllm-spec plan --acceptance'.

    Example: trtllm-spec measure --target smollm2-135m --drafter ngram --draft-len 4 --categories coding,math
    --num-prompts 2 --out measure/
    """
    from trtllm_spec.core.files import atomic_dir, check_output_dir
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.errors import CheckFailed, UserError
    from trtllm_spec.measure import write_measure_outputs
    from trtllm_spec.measure.report import lossless_problem

    if out is None and not as_json:
        raise UserError("measure needs --out DIR (files) or --json (stdout), or both")
    sweep = parse_int_list(block_sweep, "--block-sweep")
    cats = _categories(categories)
    if engine == "pytorch":
        if bundle is not None:
            raise UserError("--bundle is read by --engine trtllm only; drop it or add --engine trtllm")
        if drafter is None or draft_len is None:
            raise UserError("--engine pytorch needs --drafter (folder or 'ngram') and --draft-len D")
    elif bundle is None:
        raise UserError("--engine trtllm needs --bundle DIR (a 'trtllm-spec build' folder with llm_api_options.yaml)")
    elif drafter is not None or sweep:
        raise UserError("--engine trtllm measures the bundle's drafter at its max_draft_len; drop --drafter and "
                        "--block-sweep")
    inputs = tuple(Path(p) for p in (target, drafter) if p and p != "ngram" and Path(p).is_dir())
    if out is not None:
        check_output_dir(out, force, inputs)  # fail before minutes of decoding, not after
    common = dict(suite=suite, categories=cats, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                  temperature=temperature, seed=seed, chat_template=chat_template, progress=_log)
    if engine == "pytorch":
        from trtllm_spec.measure.run import measure

        profile = measure(target, drafter, draft_len, dtype=dtype, block_sweep=sweep, device=device, **common)
    else:
        from trtllm_spec.measure.trtllm_engine import measure_trtllm

        profile = measure_trtllm(target, bundle, draft_len, out=str(out) if out else None, **common)
    if out is not None:
        target_path = Path(profile["target"]["path"])
        args = {"target": target, "drafter": drafter, "draft_len": draft_len, "engine": engine,
                "bundle": str(bundle) if bundle else None, "suite": suite, "categories": cats,
                "num_prompts": num_prompts, "max_new_tokens": max_new_tokens, "temperature": temperature,
                "dtype": dtype, "seed": seed, "device": device,
                "chat_template": str(chat_template) if chat_template else None,
                "block_sweep": sweep}
        prov = provenance({"measure": args}, _input_files(target_path, drafter),
                          {"settings": profile["settings"], "suite": profile["suite"]})
        with atomic_dir(out, force=force, inputs=inputs) as tmp:
            write_measure_outputs(profile, tmp, prov)
    if as_json:
        echo_json(profile)
    ov = profile["overall"]
    speed = f", speedup {ov['speedup']:.2f}x" if ov.get("speedup") else ""
    where = profile["settings"].get("placement") or {}
    click.echo(f"{profile['drafter']['type']} D={profile['drafter']['draft_len']}: mean AL "
               f"{ov['mean_acceptance_length']:.2f} over {ov['num_prompts']} prompts{speed}"
               + (f" ({where['device']}, {where['dtype']})" if where else "")
               + (f"  ->  {out}/report.md" if out else ""), err=as_json)
    problem = lossless_problem(profile)
    if problem:
        raise CheckFailed(problem)
