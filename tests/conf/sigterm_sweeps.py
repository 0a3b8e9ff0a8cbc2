"""A two-job sweep signalled with SIGTERM (or Ctrl-C) once both jobs have saved an epoch, for the launchers' SIGTERM tests.

``tests/launchers/test_{joblib,ray_launcher,submitit}_sigterm.py`` each run ``train.py -m`` with their
launcher through :func:`signalled_sweep` and check what it returns; imported with
:func:`corral.testing.modules.import_path` (``tests`` is not an importable package).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from corral.testing.processes import (
    SHM_PID_PATTERNS,
    cmdline,
    lines_read_in_background,
    session_left,
    session_processes,
    shm_entries,
    started_session,
)

TRAIN = Path(__file__).resolve().parents[2] / "train.py"


@dataclass
class SignalledSweep:
    """What a signalled sweep left: its exit ``status``, its output ``lines`` (stdout and stderr), the
    processes of its session still running after it ended (``left``: pid -> command line) and the
    ``/dev/shm`` entries named after its processes that stayed (``shm``)."""

    status: int
    lines: list[str]
    left: dict[int, str]
    shm: set[str]

    @property
    def tail(self) -> str:
        """The last 40 lines, for assertion messages."""
        return "\n".join(self.lines[-40:])


def progress_rows(run_dir: Path) -> int:
    """Data rows in ``run_dir/progress.csv`` (0 while it does not exist)."""
    try:
        return len((run_dir / "progress.csv").read_text().splitlines()) - 1
    except OSError:
        return 0


def signalled_sweep(cwd: Path, sweep_dir: Path, args: Sequence[str], *, whom: str, env: dict[str, str] | None = None,
                    wait_s: float = 240, stop_s: float = 120, left_s: float = 10,
                    sig: int = signal.SIGTERM) -> SignalledSweep:
    """Run ``train.py -m <args> hydra.sweep.dir=<sweep_dir>`` in a session of its own; once jobs 0 and 1
    have each logged an epoch (within ``wait_s``), send SIGTERM (or ``sig``: SIGINT to the process group is a
    terminal's Ctrl-C) to the sweep's process alone (``whom="process"``) or to its process group
    (``"process group"``); wait ``stop_s`` for it to end,
    then ``left_s`` for its session's processes and ``/dev/shm`` entries to go. Fails the test when the
    sweep ends before the signal or does not end after it."""
    cmd = [sys.executable, str(TRAIN), "-m", *args, f"hydra.sweep.dir={sweep_dir}"]
    before = shm_entries()
    with started_session(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}) as proc:
        lines, reader = lines_read_in_background(proc)
        deadline = time.monotonic() + wait_s
        while min(progress_rows(sweep_dir / "0"), progress_rows(sweep_dir / "1")) < 1:
            assert proc.poll() is None, f"the sweep ended before {signal.Signals(sig).name}:\n" + "\n".join(lines[-40:])
            assert time.monotonic() < deadline, f"no epoch of both jobs within {wait_s} s:\n" + "\n".join(lines[-40:])
            time.sleep(0.1)
        seen = session_processes(proc.pid)  # the sweep's process, its launcher's and the jobs'
        if whom == "process":
            os.kill(proc.pid, sig)
        else:
            os.killpg(proc.pid, sig)
        try:
            status = proc.wait(timeout=stop_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the sweep still ran {stop_s} s after {signal.Signals(sig).name}:\n" + "\n".join(lines[-40:]))
        reader.join(timeout=30)
        left = {pid: cmdline(pid) for pid in session_left(proc.pid, left_s)}
        prefixes = tuple(pattern.format(pid=pid) for pid in seen for pattern in SHM_PID_PATTERNS)
        deadline = time.monotonic() + left_s
        while (shm := {n for n in shm_entries() - before if n.startswith(prefixes)}) and time.monotonic() < deadline:
            time.sleep(0.2)
    return SignalledSweep(status, lines, left, shm)


def killed_line(num: int, job_dir: Path, grace: float, stop: str = "the sweep's SIGTERM") -> tuple[str, int]:
    """The regular expression of job ``num``'s line when its launcher killed it ``grace`` seconds after ``stop``
    (:func:`corral.launchers.job_death.killed`; its group: the pid), ending with what its latest snapshot in
    ``job_dir`` holds (or that it saved none), and the epochs that snapshot holds (0: none)."""
    latest = job_dir / "snapshots" / "latest"
    if latest.is_file():
        snapshot = latest.read_text().strip()
        saved = int(snapshot.split("_")[1].split(".")[0])
        then = (rf"its latest snapshot \({re.escape(snapshot)}\) holds epochs 0-{saved - 1}: "
                rf"{re.escape(f'trainer.resume={job_dir}')} continues it")
    else:
        saved, then = 0, "it saved no snapshot, so run it again with its overrides"
    return (rf"\[job {num}\] corral: error: job {num} \(seed={num + 1} .*, in {re.escape(str(job_dir))}\) did not stop "
            rf"within {grace:g} s of {re.escape(stop)}, so its process \(pid (\d+)\) was killed with SIGKILL; {then}",
            saved)


def assert_ended_as_interrupted(run: SignalledSweep, sweep_dir: Path) -> None:
    """The sweep ended as a run stopped by SIGTERM does (exit 143), without a traceback, its last line
    corral's interrupted-sweep line naming ``sweep_dir`` (quoted for a shell), and left nothing behind:
    no process of its session, no ``/dev/shm`` entry of its processes."""
    out = run.tail
    assert run.status == 143, out
    assert "Traceback" not in out, out
    assert run.lines[-1] == (f"corral: interrupted by SIGTERM; finished jobs keep their summary.json (`corral results "
                             f"{shlex.quote(str(sweep_dir))}` lists each one's status)"), out
    assert not run.left, run.left
    assert not run.shm, run.shm


__all__ = ["SignalledSweep", "TRAIN", "assert_ended_as_interrupted", "killed_line", "progress_rows",
           "signalled_sweep"]
