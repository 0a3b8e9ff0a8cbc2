"""SIGTERM to a ``hydra/launcher=joblib`` sweep ends it as Ctrl-C does, end to end with ``train.py``.

Before: ``kill <pid of the sweep's process>`` (SIGTERM to that one process, as ``kill``, systemd or a
supervisor sends it) ended the sweep's process at once, without a line; its jobs (loky worker
processes) trained on, orphaned, until a SIGTERM reached them, their processes stayed for minutes and
loky's semaphores stayed in ``/dev/shm`` (``sem.loky-<pid>-*``). Now the launcher passes the SIGTERM on to
each running job, which stops as the trainer does on SIGTERM (``summary.json``: interrupted, its
snapshot kept), waits for them, shuts loky down and ends with the interrupted sweep's line, exit status
143 (as a run stopped by SIGTERM).

A scheduler's SIGTERM to every process of the sweep (``kill -TERM -<pgid>``) reaches each job twice:
its own and the launcher's copy. The trainer takes the copy as the same signal, not as the second one
that stops at once: between snapshots (``trainer.snapshot_every``) a job still finishes and saves the
epoch it is in.

Each test runs a 2-job sweep in a session of its own, signals it once both jobs have logged an epoch,
and checks that nothing of the sweep runs afterwards and that none of its ``/dev/shm`` entries stay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.testing.modules import import_path

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
#: ``tests/conf/sigterm_sweeps.py``: the sweep run, signalled and waited for.
sweeps = import_path(ROOT / "tests" / "conf" / "sigterm_sweeps.py", "sigterm_sweeps")
#: Two jobs at once, each training until stopped: tiny epochs, one evaluation episode, CSV only.
SWEEP = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2", "trainer.batch_size=200",
         "trainer.n_epochs=1000000", "trainer.max_env_steps=null", "trainer.eval_episodes=1", "logger=[csv]",
         "trainer.progress=false"]
#: Seconds the sweep may take to end after the SIGTERM (its jobs stop within a few).
STOP_S = 90


def _sweep_signalled(tmp_path: Path, extra: list[str], send: str) -> tuple[int, list[str], set[str]]:
    """Run the sweep into ``tmp_path/sweep`` and SIGTERM it once both jobs have logged an epoch, to the
    sweep's process alone (``send="process"``) or to its process group (``"group"``). Returns its exit
    status, its output lines and the ``/dev/shm`` entries named after the sweep's processes that are
    left (given 30 s); fails when a process of its session still runs 30 s after it ended."""
    run = sweeps.signalled_sweep(tmp_path, tmp_path / "sweep", [*SWEEP, *extra],
                                 whom="process group" if send == "group" else "process", stop_s=STOP_S, left_s=30)
    assert not run.left, f"processes of the sweep still running: {run.left}\n{run.tail}"
    return run.status, run.lines, run.shm


def _results_line(sweep_dir: Path) -> str:
    """The interrupted sweep's last line, as Ctrl-C ends it."""
    return (f"corral: interrupted by SIGTERM; finished jobs keep their summary.json (`corral results {sweep_dir}` lists each "
            "one's status)")


def _assert_jobs_saved(sweep_dir: Path, lines: list[str]) -> None:
    """Each job stopped as the trainer does on SIGTERM: its line says so and how to resume it, its
    summary.json says interrupted, and its snapshot is there."""
    out = "\n".join(lines[-40:])
    for job in ("0", "1"):
        summary = json.loads((sweep_dir / job / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["epochs"] >= 1, (summary, out)
        assert (sweep_dir / job / "snapshots" / "latest").is_file(), out
        own = [x for x in lines if x.startswith(f"[job {job}] corral: interrupted by SIGTERM ")]
        assert len(own) == 1 and own[0].endswith(f"resume with trainer.resume={sweep_dir / job}"), out


def test_sigterm_to_the_sweeps_process_alone_stops_its_jobs_and_ends_as_ctrl_c_does(tmp_path: Path) -> None:
    """``kill <sweep pid>``: the jobs get the SIGTERM from the launcher and save; nothing is left running,
    no loky semaphore stays, and the sweep ends with Ctrl-C's line and a non-zero status."""
    status, lines, shm = _sweep_signalled(tmp_path, [], send="process")
    out = "\n".join(lines[-40:])
    assert status == 143, f"exit status {status}:\n{out}"
    _assert_jobs_saved(tmp_path / "sweep", lines)
    assert lines[-1] == _results_line(tmp_path / "sweep"), out
    assert not shm, f"/dev/shm entries of the sweep left: {sorted(shm)}"
    assert "Traceback" not in "\n".join(lines), out


def test_sigterm_to_the_whole_group_is_one_stop_for_each_job(tmp_path: Path) -> None:
    """``kill -TERM -<pgid>``: each job gets the scheduler's SIGTERM and the launcher's copy; between
    snapshots the first makes it finish and save its epoch, and the copy does not stop it at once (it
    said "finishing epoch N" and then dropped that epoch, as for a second SIGTERM)."""
    status, lines, shm = _sweep_signalled(tmp_path, ["trainer.snapshot_every=1000"], send="group")
    out = "\n".join(lines[-40:])
    assert status == 143, f"exit status {status}:\n{out}"
    _assert_jobs_saved(tmp_path / "sweep", lines)
    for job in ("0", "1"):
        # stopped after an epoch it finished and saved (the copy stopped it at once: "while sampling epoch N")
        (own,) = [x for x in lines if x.startswith(f"[job {job}] corral: interrupted by SIGTERM ")]
        assert own.startswith(f"[job {job}] corral: interrupted by SIGTERM after epoch "), out
        epoch = int(own.split(" after epoch ")[1].split()[0])
        saved = json.loads((tmp_path / "sweep" / job / "summary.json").read_text())["epochs"]
        assert saved == epoch + 1 == sweeps.progress_rows(tmp_path / "sweep" / job), out
        # said once, for that epoch (none when the SIGTERM came between two epochs)
        finishing = [x for x in lines if x.startswith(f"[job {job}] corral: SIGTERM: finishing epoch ")]
        assert len(finishing) <= 1 and all(f"finishing epoch {epoch} " in x for x in finishing), out
    assert not any("already stopping" in x for x in lines), out  # the copy is dropped without a word
    assert lines[-1] == _results_line(tmp_path / "sweep"), out
    assert not shm, f"/dev/shm entries of the sweep left: {sorted(shm)}"
