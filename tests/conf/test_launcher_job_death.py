"""``hydra/launcher=submitit_local`` and ``hydra/launcher=ray`` when a job's process dies.

Before: under submitit_local a job killed by SIGKILL (as the out-of-memory killer does) left no
result, and the sweep ended with submitit's ``UncompletedJobError`` traceback (``has not produced any
output``), no line for the job and no ``summary.json``; the launcher stopped at that job, so the jobs
after it were not waited for. Under ray a crashed worker was a plain ``RuntimeError`` failed job:
Hydra's report, no ``[job N]`` line, no ``summary.json``. Now the dead job is one ``[job N] corral:
error:`` line and a failed ``summary.json`` (:mod:`corral.launchers.job_death`), the other jobs run
to their end, and the sweep ends with corral's one line, exit status 1.

submitit_local runs end to end with ``train.py``; the job dies by its environment
(:data:`dying_jobs.DYING_ENV`, no timing). Ray's conversion of its process-death errors is tested
here; a real Ray sweep whose job's process dies is in tests/launchers/test_ray_launcher_dead_job.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dying_jobs import EPOCHS, dead_job_pid, run_sweep, summary


def test_submitit_local_a_killed_job_fails_alone_and_the_other_jobs_run_to_their_end(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "multirun"
    code, err, _ = run_sweep(tmp_path, "submitit_local", "seed=1,2,3", "+env.kwargs.job=0", "+env.kwargs.how=kill")
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and "UncompletedJobError" not in err, err[-3000:]
    why = (r"the job's process \(pid (\d+)\) ended while the job ran \(submitit: job state \w+, and the job left no "
           rf"result\); trainer.resume={re.escape(str(sweep_dir / '0'))} continues it from its latest snapshot "
           r"\(epoch_\d+\.pt\)")
    pid = dead_job_pid(err, sweep_dir, why)

    dead = summary(sweep_dir, 0)
    assert dead["status"] == "failed" and dead["pid"] == pid, dead
    assert dead["error"].startswith("JobProcessDied: the job's process"), dead
    assert dead["job"]["num"] == 0 and "seed=1" in dead["overrides"] and dead["config"]["seed"] == 1
    for job in (1, 2):
        done = summary(sweep_dir, job)
        assert done["status"] == "completed" and done["epochs"] == EPOCHS, (job, done)


def _ray_failed(tmp_path: Path, what: str, cause: BaseException | None = None) -> object:
    """A failed ``JobReturn`` of corral.launchers.ray for job 2 of a sweep in ``tmp_path``, ended with ``what``
    (the Ray error ``cause``, as the launcher passes the one ``ray.get`` raised)."""
    from hydra.conf import HydraConf
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from corral.launchers.ray import _failed

    hydra = OmegaConf.structured(HydraConf)
    hydra.sweep.dir, hydra.sweep.subdir = str(tmp_path / "multirun"), "2"
    hydra.job.name, hydra.job.num, hydra.job.id = "train", 2, "train_2"
    hydra.overrides.task, hydra.mode = ["seed=3"], RunMode.MULTIRUN
    cfg = OmegaConf.create({"seed": 3})
    cfg.hydra = hydra
    ret = _failed(cfg, what, cause)
    assert isinstance(ret, JobReturn) and ret.status == JobStatus.FAILED
    return ret


def test_ray_a_crashed_worker_is_the_jobs_line_a_failed_summary_and_corrals_sweep_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn

    from corral.framework.entry import SweepJobFailed
    from hydra_plugins.corral_ray_launcher.ray_launcher import process_died

    (tmp_path / "multirun" / "2").mkdir(parents=True)
    (tmp_path / "multirun" / "2" / ".corral.lock").write_text("4242\n")
    from ray.exceptions import WorkerCrashedError

    crash = WorkerCrashedError()
    crashed = _ray_failed(tmp_path, f"WorkerCrashedError: {crash}", crash)
    previous = HydraConfig.instance().cfg
    ret = process_died(crashed, started=0.0)
    assert HydraConfig.instance().cfg is previous  # the sweep's Hydra config again
    assert isinstance(ret, JobReturn)
    with pytest.raises(SweepJobFailed) as failed:
        ret.return_value  # noqa: B018 - Hydra's sweeper reads it and raises the job's error
    why = ("the job's process (pid 4242) ended while the job ran (Ray: WorkerCrashedError: The worker died "
           "unexpectedly while executing this task); it saved no snapshot, so run it again with its overrides")
    assert str(failed.value) == (f"corral: job 2 (seed=3) failed: {why}; the sweep ran its other jobs "
                                 f"(`corral results {tmp_path / 'multirun'}` lists each one's status)")
    said = [line for line in capsys.readouterr().err.splitlines() if "corral:" in line]
    assert said == [f"[job 2] corral: error: {why}"]  # once (Hydra logs its own line when it reads the error)
    dead = summary(tmp_path / "multirun", 2)
    assert dead["status"] == "failed" and dead["pid"] == 4242 and dead["job"]["num"] == 2, dead
    assert dead["error"] == f"JobProcessDied: {why}" and dead["config"] == {"seed": 3}

    # A job that failed with an error of its own (here its SystemExit) is left as it was: not a death.
    other = _ray_failed(tmp_path, "SystemExit (exit code 1)")
    assert process_died(other, started=0.0) is other
