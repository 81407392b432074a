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
        with terminate_as_interrupt():
            return super().main(args, *a, **kw)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrtllmSpecError as exc:
            for i, line in enumerate(str(exc).splitlines() or [type(exc).__name__]):
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
    (``benchmarks/omp_wait.py``, ``benchmarks/build.md``): quiet: ACTIVE 66 ms, PASSIVE 77 ms, spin 10000 62 ms; with
    two busy processes beside it: ACTIVE 228 ms, PASSIVE ~120 ms, spin 10000 ~133 ms. PASSIVE (sleep at once) costs
    ~17% on a quiet machine; a short spin keeps the quiet speed and most of PASSIVE's gain under load. Read once,
    when libgomp loads, so it must be set before torch is first imported (child processes such as torchrun inherit
    it)."""
    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtllm-spec")
def main() -> None:
    """Speculative decoding for TensorRT-LLM without guesswork.

    A recipe names a target, a drafter ({drafters}), the hardware and the workload; trtllm-spec plans the draft
    length D from a roofline model and the five co-design guidelines, trains/exports the drafter, measures
    acceptance, and writes a TensorRT-LLM bundle.
    """


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
        raise UserError(f"--calibrate needs trtllm-bench reports after the options: {example}")
