"""The root group, error handling and shared helpers for commands."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys

import click

from trtllm_spec import __version__
from trtllm_spec.errors import TrtllmSpecError


class Group(click.Group):
    """Maps our errors to exit codes (2 bad input, 1 check failed) with one clean message, no traceback."""

    def main(self, args=None, *a, **kw):
        from trtllm_spec.core.provenance import set_command

        set_command([str(x) for x in (sys.argv[1:] if args is None else args)])
        short_omp_spin()
        no_progress_bars_in_logs()
        with terminate_as_interrupt():
            return super().main(args, *a, **kw)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrtllmSpecError as exc:
            text = name_flags_in(str(exc), ctx.meta.get(FLAG_ORIGINS) or {})
            for i, line in enumerate(text.splitlines() or [type(exc).__name__]):
                click.echo(("error: " if i == 0 else "       ") + line, err=True)
            _exit_past_a_process_group(exc.exit_code)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            code = 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
            what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
            click.echo(f"{what}: nothing half-written was kept; rerun to resume", err=True)
            _exit_past_a_process_group(code)
            ctx.exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, Slurm and container runtimes send), raised where Ctrl-C's KeyboardInterrupt is:
    every command that writes into a temporary folder or file then cleans up the same way (``atomic_dir`` and the
    writers remove their partial output on any exception), and exits 143."""


@contextlib.contextmanager
def terminate_as_interrupt():
    """While a command runs, SIGTERM raises ``Terminated`` in the main thread (the previous handler comes back
    after). Not in other threads (Python delivers signals to the main thread only) or where a caller set its own
    SIGTERM handler."""
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_past_a_process_group(code: int) -> None:
    """Under torchrun, a rank that failed leaves its process group up (``Dist.close``: a teardown could wait on
    a rank that never comes), and an interpreter exiting with a gloo group still up sometimes aborts in C++
    ("terminate called without an active exception", SIGABRT: 2 of 36 refused resumes on the 2-core machine;
    torchrun then reports the signal, not our exit 2). So such a rank, its message written and nothing
    half-written left (outputs are renamed into place), ends with ``os._exit``: no interpreter teardown. Only in a
    process a launcher started (its rank's main program), never in one that merely calls the CLI with a group up."""
    if "torch" not in sys.modules:
        return
    from trtllm_spec.core.devices import launched

    if not launched():
        return
    import torch.distributed as tdist

    if tdist.is_available() and tdist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def short_omp_spin() -> None:
    """Idle OpenMP threads spin briefly, then sleep (``GOMP_SPINCOUNT=10000``), unless the user set
    ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` themselves.

    torch's CPU kernels run on GNU OpenMP, whose idle threads spin for a long while at every barrier by default. When
    other processes share the cores, a spinning thread burns the time slice its partner needs, and every kernel
    waits. Measured on the 2-core AVX2 machine, SmolLM2-135M fp32 decode step at batch 1, 2 threads
    (``benchmarks/decisions/omp_wait.py``, ``benchmarks/build.md``): quiet: ACTIVE 66 ms, PASSIVE 77 ms, spin 10000 62 ms; with
    two busy processes beside it: ACTIVE 228 ms, PASSIVE ~120 ms, spin 10000 ~133 ms. PASSIVE (sleep at once) costs
    ~17% on a quiet machine; a short spin keeps the quiet speed and most of PASSIVE's gain under load. Read once,
    when libgomp loads, so it must be set before torch is first imported (child processes such as torchrun inherit
    it)."""
    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")


def no_progress_bars_in_logs() -> None:
    """Progress bars (transformers' "Loading weights", "Writing model shards": tqdm through huggingface_hub) only on a
    terminal: with stderr redirected to a file they are carriage-return lines in a log. Read when huggingface_hub is
    first imported, so set before (the user's own HF_HUB_DISABLE_PROGRESS_BARS wins). Plain tqdm bars (transformers'
    "Converting and de-quantizing GGUF tensors" in 'assets fetch') follow tqdm's own TQDM_DISABLE (tqdm >= 4.66)."""
    if not stderr_is_tty():
        if "huggingface_hub" not in sys.modules:
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")


def show_third_party(verbose: bool) -> None:
    """``--verbose``: what third-party libraries print (ModelOpt's conversion lines; ``train/quiet.py`` sends them to
    the ``trtllm_spec.thirdparty`` logger) is shown on stderr; without it, only their warnings and errors."""
    import logging

    lg = logging.getLogger("trtllm_spec.thirdparty")
    if verbose and not lg.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  %(message)s"))
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)


def _verbose(ctx: click.Context, param, value: bool) -> None:
    show_third_party(value)


# the same flag on the commands that train or convert (``trtllm-spec build R --verbose``) as on the root group
verbose_option = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbose,
                              help="Also show what third-party libraries print (ModelOpt's conversion lines), kept "
                              "out otherwise.")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtllm-spec")
@click.option("-v", "--verbose", is_flag=True, help="Also show what third-party libraries print (ModelOpt's "
              "conversion lines), kept out otherwise.")
def main(verbose: bool) -> None:
    """Speculative decoding for TensorRT-LLM without guesswork.

    A recipe names a target, a drafter ({drafters}), the hardware and the workload; trtllm-spec plans the draft
    length D from a roofline model and the five co-design guidelines, trains/exports the drafter, measures
    acceptance, and writes a TensorRT-LLM bundle.
    """
    show_third_party(verbose)


def _root_help() -> str:
    """The root --help with the drafter types of the recipe union (the registry asserts the same names)."""
    from trtllm_spec.core.recipe import DRAFTER_TYPES

    return (main.help or "").replace("{drafters}", ", ".join(DRAFTER_TYPES))


main.help = _root_help()


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2))


def parse_int_list(value: str | None, name: str) -> list[int] | None:
    if value is None:
        return None
    try:
        out = [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers, e.g. 1,8,64",
                                 param_hint=name) from None
    if not out:
        raise click.BadParameter("give at least one value, e.g. 1,8,64", param_hint=name)
    return out


def field_choices(model, name: str, drop: tuple[str, ...] = ()) -> list[str]:
    """The allowed values of a Literal field of a recipe model: CLI choices derived from the schema."""
    from typing import get_args

    return [v for v in get_args(model.model_fields[name].annotation) if v not in drop]


class _LiveChoice(click.Choice):
    """A choice whose values are read from a registry when used (a release registered later is a choice too)."""

    def __init__(self, values) -> None:
        self._values = values
        super().__init__(list(values()))

    @property
    def choices(self):  # type: ignore[override]
        return tuple(self._values())

    @choices.setter
    def choices(self, _value) -> None:
        pass


def release_choice() -> click.Choice:
    """``--trtllm-version``'s choices: 'auto' and every release record (core/releases.py)."""
    from trtllm_spec.core.releases import names

    return _LiveChoice(lambda: ("auto", *names()))


def field_default(model, name: str):
    """A recipe model field's default: CLI defaults derived from the schema."""
    return model.model_fields[name].get_default(call_default_factory=True)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override a recipe field, e.g. --set workload.isl=4096 (repeatable).")


def check_calibrate_args(command: str, reports, calibrate: bool, example: str) -> None:
    """``plan`` / ``replan``: trailing REPORT arguments only with ``--calibrate``, and ``--calibrate`` only with them."""
    from trtllm_spec.errors import UserError

    if reports and not calibrate:
        raise UserError(f"{command} takes reports only with --calibrate (got {' '.join(map(str, reports))}); add "
                        "--calibrate or drop them")
    if calibrate and not reports:
        raise UserError(f"--calibrate needs trtllm-bench reports (or 'measure served' folders) after the options: "
                        f"{example}")


def echo_interval_change(plan: dict, err: bool) -> None:
    """After a calibration: whether it narrowed or widened the predicted-speedup intervals, and by how much
    (plan.json ``uncertainty.calibration``, worded by report.host_costs.interval_change)."""
    from trtllm_spec.report.host_costs import interval_change

    c = interval_change((plan.get("uncertainty") or {}).get("calibration") or {})
    if c is None:
        return
    if c["verb"] == "unchanged":
        click.echo(f"speedup intervals unchanged at {c['before']} of the prediction (median width)", err=err)
    else:
        click.echo(f"speedup intervals {c['verb']} from {c['before']} to {c['after']} of the prediction (median "
                   f"width, {c['by']}){': ' + c['why'] if c['why'] else ''}", err=err)


def name_flags_in(text: str, origins: dict[str, str]) -> str:
    """``text`` with each recipe key path the command set from a flag named as that flag (``origins``: key path ->
    flag, e.g. ``{"engine.trtllm_version": "--trtllm-version"}``): ``engine.trtllm_version: '1.3'`` and
    ``engine.trtllm_version = 1.3`` become ``--trtllm-version 1.3``, a bare ``engine.trtllm_version`` becomes
    ``--trtllm-version``, and in a problem located at a section (``hardware: tp*pp = 3 ...``) the section's keys that
    came from flags are named as them. Key paths the user wrote in a recipe or with ``--set`` are left as keys."""
    import re

    for path, flag in sorted(origins.items(), key=lambda kv: -len(kv[0])):
        key = re.escape(path)
        edge = r"(?<![\w.\-])"
        text = re.sub(edge + key + r"(?:: '([^']*)'| = ([^\s;,:)]+))",
                      lambda m, flag=flag: f"{flag} {m.group(1) or m.group(2)}", text)
        text = re.sub(edge + key + r"(?![\w.])", flag, text)
        # a message that already named the flag beside the key ("key = 7 (--flag)") names it once
        text = re.sub(re.escape(flag) + r"( [^\s(]+)? \(" + re.escape(flag) + r"\)", lambda m, flag=flag:
                      flag + (m.group(1) or ""), text)
    sections: dict[str, dict[str, str]] = {}
    for path, flag in origins.items():
        section, _, leaf = path.rpartition(".")
        if section:
            sections.setdefault(section, {})[leaf] = flag
    lines = []
    for line in text.splitlines():
        for section, leaves in sections.items():
            head = f"{section}: "
            at = line.find(head)
            if at >= 0 and (at == 0 or line[at - 2:at] == ": "):
                body = line[at + len(head):]
                for leaf, flag in leaves.items():
                    body = re.sub(r"(?<![\w.\-])" + re.escape(leaf) + r"(?![\w.])", flag, body)
                line = line[:at + len(head)] + body
        lines.append(line)
    return "\n".join(lines)


FLAG_ORIGINS = "trtllm_spec.flag_origins"


def record_flag_origins(origins: dict[str, str]) -> None:
    """Say which recipe key paths this command set from flags (key path -> flag): any of our errors it raises
    then names them as those flags (``Group.invoke`` applies ``name_flags_in``), so a value from a flag is named as
    the flag the user typed, a value from a recipe as its key."""
    click.get_current_context().meta.setdefault(FLAG_ORIGINS, {}).update(origins)
