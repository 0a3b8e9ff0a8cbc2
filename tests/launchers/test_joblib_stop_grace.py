"""A ``hydra/launcher=joblib`` job that does not stop when its sweep is stopped is killed after the launcher's
grace, and is said and recorded, end to end with ``train.py``.

Before: SIGTERM to the sweep's process was passed on to each running job; a job still running
``TERM_GRACE_S`` (30 s) later (code in it that handles SIGTERM without stopping: here an environment's own
SIGTERM handler, ``tests/conf/stubborn_env.py``) was killed with SIGKILL without a word: no line, no
``summary.json``, and ``corral results`` listed its directory as ``unfinished``. Now each such job gets one
``[job N] corral: error:`` line naming the job, its directory and what its latest snapshot holds, and a
``summary.json`` with ``status: killed`` and the epochs that snapshot holds, which ``corral results`` lists
as not completed, with that line. (The grace is the launcher's own 30 s: Hydra executes the launcher's module
again when it scans its plugins, so a constant lowered before ``train.py``'s main would not hold.)
"""

from __future__ import annotations

import json
import os
import re
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
#: Two jobs at once whose environments ignore SIGTERM, each training until stopped.
SWEEP = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2", "env=gym",
         "env.id=stubborn_env:corral_test/StubbornCartPole-v1", "+env.kwargs.on_sigterm=ignore",
         "trainer.batch_size=200", "trainer.n_epochs=1000000", "trainer.max_env_steps=null", "trainer.eval_every=0",
         "logger=[csv]", "trainer.progress=false", "sampler=local"]


def test_jobs_still_running_after_the_sigterm_grace_are_named_and_recorded_as_killed(tmp_path: Path) -> None:
    from hydra_plugins.corral_joblib_launcher.joblib_launcher import TERM_GRACE_S

    sweep_dir = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(CONF), os.environ.get("PYTHONPATH", "")) if p)}
    run = sweeps.signalled_sweep(tmp_path, sweep_dir, SWEEP, whom="process", env=env, stop_s=TERM_GRACE_S + 90,
                                 left_s=30)
    sweeps.assert_ended_as_interrupted(run, sweep_dir)
    out = run.tail
    assert sum(f"{stubborn_env.SAID} in pid" in line for line in run.lines) == 2, out  # each job had it

    for num in (0, 1):
        said = [line for line in run.lines if line.startswith(f"[job {num}] corral: error: ")]
        assert len(said) == 1, out
        job_dir = sweep_dir / str(num)
        snapshot = (job_dir / "snapshots" / "latest").read_text().strip()
        saved = int(snapshot.split("_")[1].split(".")[0])
        assert saved >= 1, snapshot
        found = re.fullmatch(
            rf"\[job {num}\] corral: error: job {num} \(seed={num + 1} .*, in {re.escape(str(job_dir))}\) did not stop "
            rf"within {TERM_GRACE_S:g} s of the sweep's SIGTERM, so its process \(pid (\d+)\) was killed with SIGKILL; "
            rf"its latest snapshot \({re.escape(snapshot)}\) holds epochs 0-{saved - 1}: "
            rf"{re.escape(f'trainer.resume={job_dir}')} continues it", said[0])
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
