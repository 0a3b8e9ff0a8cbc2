"""Ctrl-C in a ``hydra/launcher=submitit_local`` sweep: corral's line, and nothing after it.

submitit starts a job controller process per job (``python -m submitit.local._local``) in the sweep's
process group, so the terminal's SIGINT reached each controller too. It printed a ``KeyboardInterrupt``
traceback after ``corral: interrupted; ...``, and on its way out sent its job a second SIGINT (corral's
trainer takes a second Ctrl-C as "stop now") and a SIGKILL a second later. corral now starts each
controller with SIGINT left to the job (``quiet_controllers`` in the submitit launcher).

Each test runs a one-job sweep end to end in a session of its own and sends SIGINT to its process group
(Ctrl-C in a terminal) once the job has finished an epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import cmdline, lines_read_in_background, session_left, started_session

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytest.importorskip("submitit")

ROOT = Path(__file__).resolve().parents[2]
#: CSV only, no progress bar, one evaluation episode, running until interrupted.
RUN = ["trainer.n_epochs=1000000", "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false",
       "trainer.max_env_steps=null"]
#: Most seconds any wait of these tests takes (the machine running them may be busy).
WAIT_S = 240


def _interrupted(tmp_path: Path, overrides: list[str]) -> tuple[list[str], str, Path]:
    """Run a one-job ``submitit_local`` sweep into ``tmp_path/sweep`` and press Ctrl-C (SIGINT to its
    process group) once job 0 has a row in progress.csv. Returns the sweep's output lines, job 0's
    stderr log and its directory; asserts exit status 130 and that nothing of the sweep is left running."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", *RUN, *overrides,
           f"hydra.sweep.dir={sweep}"]
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        lines, reader = lines_read_in_background(proc)
        progress = sweep / "0" / "progress.csv"
        deadline = time.monotonic() + WAIT_S
        while not (progress.is_file() and len(progress.read_text().splitlines()) >= 2):
            assert proc.poll() is None, "the sweep ended before it was interrupted:\n" + "\n".join(lines[-40:])
            assert time.monotonic() < deadline, f"no finished epoch within {WAIT_S} s:\n" + "\n".join(lines[-40:])
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=120)
        left = session_left(proc.pid, timeout=60)  # the job saves and ends after the sweep's process
        reader.join(timeout=30)
    out = "\n".join(lines[-40:])
    assert status == 130, out
    assert not left, {pid: cmdline(pid) for pid in left}
    logs = sorted((sweep / ".submitit").rglob("*_0_log.err"))
    assert len(logs) == 1, logs
    return lines, logs[0].read_text(), sweep / "0"


def test_ctrl_c_prints_only_corrals_line(tmp_path: Path) -> None:
    """The sweep's output ends with corral's line: no traceback from submitit's job controllers after it;
    the job says it was interrupted (in its log) and keeps its snapshot, as before."""
    lines, log, job = _interrupted(tmp_path, ["trainer.batch_size=500"])
    out = "\n".join(lines[-40:])
    assert lines[-1].startswith("corral: interrupted; finished jobs keep their summary.json"), out
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in lines), out
    assert "[job 0] corral: interrupted " in log, log
    assert (job / "snapshots" / "latest").is_file(), log
    assert json.loads((job / "summary.json").read_text())["status"] == "interrupted"


def test_one_ctrl_c_lets_the_job_finish_its_epoch_and_save_it(tmp_path: Path) -> None:
    """With finished epochs not in a snapshot yet (``trainer.snapshot_every=1000``), a first Ctrl-C lets the
    job finish its epoch (several seconds here) and save it, as ``train.py`` alone does. The controller sent
    the job a second SIGINT (which stops it at once, losing its epochs) and SIGKILL a second later."""
    lines, log, job = _interrupted(tmp_path, ["trainer.batch_size=5000", "trainer.snapshot_every=1000"])
    assert "[job 0] corral: Ctrl-C: finishing epoch" in log, log
    assert "are saved (progress rows and snapshot); resume with trainer.resume=" in log, log
    assert "nothing to resume" not in log, log
    assert (job / "snapshots" / "latest").is_file(), log
    assert lines[-1].startswith("corral: interrupted; finished jobs keep their summary.json"), "\n".join(lines[-40:])
