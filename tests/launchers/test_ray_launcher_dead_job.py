"""``hydra/launcher=ray`` when a job's process dies, end to end with ``train.py`` on a real local Ray runtime.

The job's Ray worker process is killed by SIGKILL (as the out-of-memory killer kills) from the job's
own environment, :data:`dying_jobs.DYING_ENV`, at a given step and only in job 0 (no timing); job 1
runs beside it. The sweep's output is job 0's one ``[job 0] corral: error:`` line and corral's sweep
line (exit status 1), job 0 has a failed ``summary.json`` and job 1 a completed one, and no process
of the sweep (the Ray runtime it started, its workers) is left running.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "conf"))
import dying_jobs  # noqa: E402  - the jobs that die by DYING_ENV, and the checks of their lines

#: Two jobs of one epoch of ~200 steps; job 0's process dies at its 100th step (before any snapshot).
SWEEP = ["hydra/launcher=ray", "seed=1,2", "env=gym", "env.id=dying_env:dying/DyingCartPole-v1", "+env.kwargs.job=0",
         "+env.kwargs.how=kill", "+env.kwargs.fail_at=100", "trainer.n_epochs=1", "trainer.batch_size=200",
         "trainer.eval_every=0", "logger=[csv]", "trainer.progress=false"]


def test_a_killed_job_fails_alone_and_leaves_no_ray_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local runtime of the sweep's own
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    sweep_dir = tmp_path / "multirun"
    # No process of the sweep's session (Ray's runtime, its workers) may run a few seconds after it exited.
    code, err, seen = dying_jobs.run_watched_sweep(tmp_path, {"dying_env": dying_jobs.DYING_ENV}, *SWEEP)
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    why = (r"the job's process \(pid (\d+)\) ended while the job ran \(Ray: WorkerCrashedError: [^;]*\); it saved no "
           r"snapshot, so run it again with its overrides")
    pid = dying_jobs.dead_job_pid(err, sweep_dir, why)
    dead = dying_jobs.summary(sweep_dir, 0)
    assert dead["status"] == "failed" and dead["pid"] == pid, dead
    assert dead["error"].startswith("JobProcessDied: the job's process") and "WorkerCrashedError" in dead["error"]
    assert dead["job"]["num"] == 0 and "seed=1" in dead["overrides"] and dead["config"]["seed"] == 1
    done = dying_jobs.summary(sweep_dir, 1)
    assert done["status"] == "completed" and done["epochs"] == 1 and done["pid"] != pid, done
    assert pid in seen  # Ray's processes were the sweep's session's, which the check above covers
    # Job 1's own line (its process's, forwarded by Ray) reached the sweep's output too.
    assert re.search(r"\[job 1\] corral: completed", err), err[-3000:]
