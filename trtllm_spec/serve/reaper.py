"""A server's keeper: ``python reaper.py PARENT_PID -- CMD ...`` runs CMD as its child and, when told to stop (SIGTERM,
SIGINT) or when PARENT_PID dies, ends every process of its session and removes the ``/dev/shm`` files they held.

Why: a server such as vLLM starts processes of its own (vLLM's engine core and worker) that do not watch the process
we started; killed outright (SIGKILL), we take our direct child with us (``PR_SET_PDEATHSIG``) but its children
would live on, and a process killed outright removes none of its shared memory. The keeper is that direct child:
it asks the kernel for SIGTERM (not SIGKILL) when its parent dies, so it can still end the rest. Standard library
only, run by path with our interpreter: nothing of the server's environment is imported.

Stopping: SIGTERM to CMD (its own shutdown), ``GRACE_S`` for the session to empty, then SIGKILL to what is left;
the ``/dev/shm`` files any member mapped or held open (read from ``/proc/PID/maps`` and ``/proc/PID/fd`` while they
ran, every ``SCAN_S`` and once more before the kill) are removed after. The keeper exits with CMD's exit code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 10.0
SCAN_S = 2.0
PR_SET_PDEATHSIG = 1


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies excluded), the caller excluded."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def shm_files(pids: list[int]) -> set[str]:
    """``/dev/shm`` files the processes map or hold open now."""
    out: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                    out.add(parts[5].removesuffix(" (deleted)"))
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("/dev/shm/"):
                        out.add(target.removesuffix(" (deleted)"))
    return {f for f in out if os.path.dirname(f) == "/dev/shm"}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: reaper.py PARENT_PID -- CMD ...", file=sys.stderr)
        return 2
    parent, cmd = int(argv[0]), argv[2:]
    stop = {"asked": False}

    def ask(_sig, _frame) -> None:
        stop["asked"] = True

    signal.signal(signal.SIGTERM, ask)
    signal.signal(signal.SIGINT, ask)
    if sys.platform.startswith("linux"):  # our parent's death is a SIGTERM to us (the one who started us set SIGKILL)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        return 1
    sid = os.getsid(0)
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    held: set[str] = set()
    while not stop["asked"] and child.poll() is None:
        held |= shm_files(session_pids(sid))
        for _ in range(int(SCAN_S / 0.1)):
            if stop["asked"] or child.poll() is not None:
                break
            time.sleep(0.1)
    held |= shm_files(session_pids(sid))
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        left = session_pids(sid)
        if not left:
            break
        held |= shm_files(left)
        with contextlib.suppress(ChildProcessError):
            child.poll()
        time.sleep(0.1)
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=5)
    for _ in range(50):  # the killed ones are gone before their files are removed
        if not session_pids(sid):
            break
        time.sleep(0.1)
    for f in held:
        with contextlib.suppress(OSError):
            os.unlink(f)
    code = child.returncode
    return 0 if stop["asked"] else (code if code is not None and code >= 0 else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
