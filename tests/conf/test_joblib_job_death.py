"""``hydra/launcher=joblib`` when a job's process dies, end to end with ``train.py`` as a user runs it.

Before: a job's loky worker killed by SIGKILL (as the out-of-memory killer does) broke joblib's pool,
which killed the job running beside it mid-training; the jobs not started never ran, and the sweep
ended with joblib's ``TerminatedWorkerError`` traceback. With ``hydra.launcher.n_jobs=1`` joblib ran
the jobs in the sweep's own process, so a job that called ``os._exit(3)`` ended the whole sweep (exit
status 3, no line). Now the dead job is one ``[job N] corral: error:`` line and a failed
``summary.json``, the other jobs run to their end, and the sweep ends with the failed job's line.

The job dies by its environment (no timing): :data:`dying_jobs.DYING_ENV` kills its own process at a
given step, only in the sweep's job number ``job``.
"""

from __future__ import annotations

import re
from pathlib import Path

import dying_jobs
import pytest
from dying_jobs import EPOCHS, dead_job_pid, summary

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")


def run_sweep(tmp_path: Path, *overrides: str) -> tuple[int, str, int]:
    """Run ``train.py -m hydra/launcher=joblib <overrides>`` (:func:`dying_jobs.run_sweep`)."""
    return dying_jobs.run_sweep(tmp_path, "joblib", *overrides)


def test_a_killed_job_fails_alone_and_the_jobs_beside_and_after_it_run_to_their_end(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    code, err, _ = run_sweep(tmp_path, "hydra.launcher.n_jobs=2", "seed=1,2,3,4", "+env.kwargs.job=0",
                             "+env.kwargs.how=kill")
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and "TerminatedWorkerError" not in err, err[-3000:]
    why = (r"the job's process \(pid (\d+)\) was killed by SIGKILL while the job ran, as the out-of-memory killer "
           r"does when the machine runs out of memory \(`dmesg` says whether it did\): run fewer jobs at once "
           r"\(hydra.launcher.n_jobs\) or give them less to hold; "
           rf"trainer.resume={re.escape(str(sweep_dir / '0'))} continues it from its latest snapshot \(epoch_\d+\.pt\)")
    pid = dead_job_pid(err, sweep_dir, why)

    dead = summary(sweep_dir, 0)
    assert dead["status"] == "failed" and dead["pid"] == pid, dead
    assert dead["error"].startswith("JobProcessDied: the job's process") and "SIGKILL" in dead["error"]
    assert dead["job"]["num"] == 0 and "seed=1" in dead["overrides"] and dead["config"]["seed"] == 1
    for job in (1, 2, 3):
        done = summary(sweep_dir, job)
        assert done["status"] == "completed" and done["epochs"] == EPOCHS, (job, done)
        rows = (sweep_dir / str(job) / "progress.csv").read_text().strip().splitlines()
        assert len(rows) == 1 + EPOCHS, (job, rows)  # each epoch once: not run again
    # job 1 ran beside job 0 when it died, and went on to its end (not run again after the death)
    beside = summary(sweep_dir, 1)
    assert beside["started_at"] < dead["finished_at"] < beside["finished_at"], (beside, dead)
    assert beside["pid"] != pid


def test_with_one_job_at_a_time_a_job_that_ends_its_process_fails_alone(tmp_path: Path) -> None:
    """``n_jobs=1``: the jobs run in a loky worker process too, not in the sweep's."""
    sweep_dir = tmp_path / "multirun"
    code, err, sweep_pid = run_sweep(tmp_path, "hydra.launcher.n_jobs=1", "seed=1,2,3", "+env.kwargs.job=1",
                                     "+env.kwargs.how=exit")
    assert code == 1, err[-3000:]
    lines = err.strip().splitlines()
    why = (r"the job's process \(pid \d+\) exited with code 3 while the job ran \(code that ends its process at once: "
           r"os._exit\(\) or a library's exit\); trainer.resume=\S+ continues it from its latest snapshot "
           r"\(epoch_\d+\.pt\)")
    assert len([line for line in lines if line.startswith("[job 1] corral: error: ")]) == 1, err[-3000:]
    assert any(re.fullmatch(r"\[job 1\] corral: error: " + why, line) for line in lines), err[-3000:]
    assert re.fullmatch(rf"corral: job 1 \(.*seed=2.*\) failed: {why}; the sweep ran its other jobs .*", lines[-1]), \
        lines[-1]
    assert summary(sweep_dir, 1)["status"] == "failed"
    for job in (0, 2):
        done = summary(sweep_dir, job)
        assert done["status"] == "completed" and done["epochs"] == EPOCHS, (job, done)
        assert done["pid"] != sweep_pid  # in a worker process, not the sweep's
    assert summary(sweep_dir, 2)["started_at"] > summary(sweep_dir, 1)["finished_at"]
