"""``trtllm-spec hw list|show|probe``."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main


@main.group("hw")
def hw_group() -> None:
    """The hardware catalogue, and a probe that measures this machine."""


@hw_group.command("list")
def hw_list() -> None:
    """GPUs in the catalogue with their datasheet peaks."""
    from rich.console import Console
    from rich.table import Table

    from trtllm_spec.core.hardware import CATALOGUE

    table = Table("name", "bf16 TFLOP/s", "fp8", "fp4", "HBM TB/s", "HBM GB", "NVLink GB/s/dir", "description")
    for h in CATALOGUE.values():
        p = h.peak_flops_per_s
        table.add_row(h.name, f"{p['bf16'] / 1e12:g}", f"{p['fp8'] / 1e12:g}" if "fp8" in p else "-",
                      f"{p['fp4'] / 1e12:g}" if "fp4" in p else "-", f"{h.mem_bytes_per_s / 1e12:g}",
                      f"{h.mem_bytes / 1e9:g}", f"{h.interconnect_bytes_per_s / 1e9:g}", h.description)
    Console(width=140).print(table)


@hw_group.command("show")
@click.argument("gpu")
def hw_show(gpu: str) -> None:
    """Print one hardware entry (catalogue name or probe file) as JSON, efficiencies included."""
    from trtllm_spec.core.hardware import load_hardware

    echo_json(load_hardware(gpu).model_dump(mode="json"))


@hw_group.command("probe")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Write the hardware entry here (.json).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="What to probe: this CPU, the CUDA GPU, or auto (CUDA when torch sees a GPU).")
@click.option("--quick", is_flag=True, help="Fewer sizes and repeats (for tests).")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
@click.option("--target", help="Measure the GEMM curves on this model's own linear layers (path, preset or asset; "
              "dense models). Plans for that target then read what its matrices cost here, not a 4096-square GEMM.")
def hw_probe(out: Path, device: str, quick: bool, force: bool, target: str | None) -> None:
    """Measure this machine (matmul FLOP/s by M and dtype, memory bandwidth, per-forward overhead) and write a
    hardware entry that 'plan --gpu FILE' accepts. Needs torch (pip install 'trtllm-spec[train]')."""
    from trtllm_spec.core.files import write_json_atomic
    from trtllm_spec.errors import OutputExistsError, UserError

    if out.exists() and not force:
        raise OutputExistsError(f"{out} exists; pass --force to replace it")
    if out.suffix.lower() != ".json":
        raise UserError(f"--out {out}: the probe writes JSON; name the file *.json")
    from trtllm_spec.stages.hw import probe_machine

    hw = probe_machine(device, quick, target, log=lambda msg: click.echo(msg, err=True))
    write_json_atomic(out, hw.model_dump(mode="json"))
    where = (hw.probe or {}).get("placement") or {}
    click.echo(f"wrote {out}: {hw.description} (device {where.get('device')}, auto dtype {where.get('dtype')})")
