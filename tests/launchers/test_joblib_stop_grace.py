"""A ``hydra/launcher=joblib`` job that does not stop when its sweep is stopped is killed after the launcher's
grace, and is said and recorded, end to end with ``train.py``.

Before: SIGTERM to the sweep's process was passed on to each running job; a job still running the launcher's
grace later (code in it that handles SIGTERM without stopping: here an environment's own SIGTERM handler,
``tests/conf/stubborn_env.py``) was killed with SIGKILL without a word: no line, no ``summary.json``, and
``corral results`` listed its directory as ``unfinished``. Now each such job gets one ``[job N] corral: error:``
line naming the job, its directory and what its latest snapshot holds, and a ``summary.json`` with ``status:
killed`` and the epochs that snapshot holds, which ``corral results`` lists as not completed, with that line.

The grace is ``hydra.launcher.cancel_grace_s`` (it was a constant of 30 s after a SIGTERM and 3 s after
Ctrl-C, which a job finishing an epoch longer than 3 s did not get to save); a value below 0 is one line
before any job starts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.testing.modules import import_path

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "tests" / "conf"
sweeps = import_path(CONF / "sigterm_sweeps.py", "sigterm_sweeps")
stubborn_env = import_path(CONF / "stubborn_env.py", "stubborn_env")
#: ``hydra.launcher.cancel_grace_s`` of these sweeps (the default 30 s would hold the test that much longer).
GRACE_S = 8
#: Two jobs at once whose environments ignore SIGTERM, each training until stopped.
SWEEP = ["hydra/launcher=joblib", f"hydra.launcher.cancel_grace_s={GRACE_S}", "hydra.launcher.n_jobs=2", "seed=1,2",
         "env=gym", "env.id=stubborn_env:corral_test/StubbornCartPole-v1", "+env.kwargs.on_sigterm=ignore",
         "trainer.batch_size=200", "trainer.n_epochs=1000000", "trainer.max_env_steps=null", "trainer.eval_every=0",
         "logger=[csv]", "trainer.progress=false", "sampler=local"]


def test_jobs_still_running_after_the_sigterm_grace_are_named_and_recorded_as_killed(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(CONF), os.environ.get("PYTHONPATH", "")) if p)}
    run = sweeps.signalled_sweep(tmp_path, sweep_dir, SWEEP, whom="process", env=env, stop_s=GRACE_S + 90,
                                 left_s=30)
    sweeps.assert_ended_as_interrupted(run, sweep_dir)
    out = run.tail
    assert sum(f"{stubborn_env.SAID} in pid" in line for line in run.lines) == 2, out  # each job had it

    for num in (0, 1):
        said = [line for line in run.lines if line.startswith(f"[job {num}] corral: error: ")]
        assert len(said) == 1, out
        job_dir = sweep_dir / str(num)
        pattern, saved = sweeps.killed_line(num, job_dir, GRACE_S)
        assert saved >= 1, pattern
        found = re.fullmatch(pattern, said[0])
        assert found is not None, said[0]
        killed = json.loads((job_dir / "summary.json").read_text())
        assert killed["status"] == "killed", killed
        assert killed["error"] == f"JobKilled: {said[0].split('error: ', 1)[1]}", killed
        assert killed["epochs"] == saved and killed["last_saved_epoch"] == saved - 1, killed
        assert killed["pid"] == int(found.group(1)) and killed["job"]["num"] == num, killed

    # corral results counts them as not completed, saying why, rather than as directories without a record
    listed = subprocess.run([sys.executable, "-m", "corral.framework.cli", "results", str(sweep_dir)],
                            capture_output=True, text=True, timeout=120)
    text = listed.stdout + listed.stderr
    assert listed.returncode == 2, text
    for num in (0, 1):
        assert f"{sweep_dir / str(num)} (killed: JobKilled: job {num} (seed={num + 1} " in text, text
    assert "unfinished" not in text and "(2 killed" in text, text


#: Two jobs whose epochs take seconds (16,000 CartPole steps and PPO's update on them, two jobs sharing the
#: cores), snapshotted only at the end: Ctrl-C once both have logged epoch 0 has each finish epoch 1 and save
#: epochs 0-1 (``finishing epoch 1 to save it``), which takes longer than the 3 s a job had after Ctrl-C.
LONG_EPOCHS = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2", "trainer.batch_size=16000",
               "trainer.n_epochs=1000000", "trainer.max_env_steps=null", "trainer.eval_every=0",
               "trainer.snapshot_every=1000", "logger=[csv]", "trainer.progress=false", "sampler=local"]


def _ctrl_c_line(sweep_dir: Path) -> str:
    return (f"corral: interrupted; finished jobs keep their summary.json (`corral results {sweep_dir}` lists each "
            "one's status)")


def test_ctrl_c_gives_each_job_the_grace_to_finish_and_save_its_epoch(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the sweep's process group, as a terminal sends it): each job finishes the epoch it is
    in and saves it within the default ``cancel_grace_s`` (30 s), and nothing is killed (with the 3 s it had,
    both were killed mid-epoch and the epoch was lost)."""
    sweep_dir = tmp_path / "sweep"
    run = sweeps.signalled_sweep(tmp_path, sweep_dir, LONG_EPOCHS, whom="process group", sig=signal.SIGINT,
                                 stop_s=120, left_s=30)
    out = run.tail
    assert run.status == 130, out
    assert run.lines[-1] == _ctrl_c_line(sweep_dir), out
    assert not run.left and not run.shm, (run.left, run.shm)
    assert not any("corral: error:" in line or "Traceback" in line for line in run.lines), out
    for num in (0, 1):
        job_dir = sweep_dir / str(num)
        summary = json.loads((job_dir / "summary.json").read_text())
        assert summary["status"] == "interrupted", summary
        epochs = summary["epochs"]
        assert epochs >= 2 and epochs == sweeps.progress_rows(job_dir), (summary, out)  # the epoch it was in: saved
        assert (job_dir / "snapshots" / "latest").read_text().strip() == f"epoch_{epochs:06d}.pt", out


def test_a_job_still_finishing_its_epoch_after_the_ctrl_c_grace_is_named_and_recorded_as_killed(tmp_path: Path) -> None:
    """``hydra.launcher.cancel_grace_s=1``: the jobs, each finishing an epoch of seconds, are killed 1 s after
    Ctrl-C; each gets its line, saying it saved no snapshot, and a ``summary.json`` that says killed."""
    sweep_dir = tmp_path / "sweep"
    run = sweeps.signalled_sweep(tmp_path, sweep_dir, [*LONG_EPOCHS, "hydra.launcher.cancel_grace_s=1"],
                                 whom="process group", sig=signal.SIGINT, stop_s=120, left_s=30)
    out = run.tail
    assert run.status == 130, out
    assert run.lines[-1] == _ctrl_c_line(sweep_dir), out
    assert not run.left and not run.shm, (run.left, run.shm)
    for num in (0, 1):
        job_dir = sweep_dir / str(num)
        said = [line for line in run.lines if line.startswith(f"[job {num}] corral: error: ")]
        assert len(said) == 1, out
        pattern, saved = sweeps.killed_line(num, job_dir, 1, stop="the sweep's Ctrl-C")
        assert saved == 0 and re.fullmatch(pattern, said[0]), said[0]  # snapshot_every=1000: none yet
        killed = json.loads((job_dir / "summary.json").read_text())
        assert killed["status"] == "killed" and killed["error"] == f"JobKilled: {said[0].split('error: ', 1)[1]}", killed


def test_a_grace_below_zero_is_one_line_before_any_job(tmp_path: Path) -> None:
    """``hydra.launcher.cancel_grace_s=-1``: one line naming the setting, and no job starts."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=joblib", "seed=1,2",
                           "hydra.launcher.cancel_grace_s=-1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert err[-1].startswith("corral: error: hydra.launcher.cancel_grace_s must be >= 0 seconds"), proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "sweep" / "0").exists(), proc.stderr
