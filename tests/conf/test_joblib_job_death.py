"""``hydra/launcher=joblib`` when a job's process dies, end to end with ``train.py`` as a user runs it.

Before: a job's loky worker killed by SIGKILL (as the out-of-memory killer does) broke joblib's pool,
which killed the job running beside it mid-training; the jobs not started never ran, and the sweep
ended with joblib's ``TerminatedWorkerError`` traceback. With ``hydra.launcher.n_jobs=1`` joblib ran
the jobs in the sweep's own process, so a job that called ``os._exit(3)`` ended the whole sweep (exit
status 3, no line). Now the dead job is one ``[job N] corral: error:`` line and a failed
``summary.json``, the other jobs run to their end, and the sweep ends with the failed job's line.

The job dies by its environment (no timing): :data:`DYING_ENV` kills its own process at a given step,
only in the sweep's job number ``job``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import session_processes, started_session

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
EPOCHS = 8
#: Small runs: EPOCHS epochs of ~500 steps, no evaluation, CSV only.
SMALL = [f"trainer.n_epochs={EPOCHS}", "trainer.batch_size=500", "trainer.eval_every=0", "logger=[csv]",
         "trainer.progress=false", "sampler=local"]
#: A module the jobs import (env.id=dying_env:...): CartPole whose process dies at step ``fail_at`` in the
#: sweep's job number ``job`` only (``how=kill``: SIGKILL, as the out-of-memory killer sends; ``how=exit``:
#: ``os._exit(3)``, as native code or a library that ends the process does).
DYING_ENV = '''
import os
import signal

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


def job_num():
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().job.get("num")
    except ValueError:  # not in a job (a check before the sweep)
        return None


class DyingCartPole(CartPoleEnv):
    def __init__(self, job=0, fail_at=700, how="kill", **kwargs):
        super().__init__(**kwargs)
        self.job, self.fail_at, self.how, self.steps = int(job), int(fail_at), how, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at and job_num() == self.job:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        return super().step(action)


if "dying/DyingCartPole-v1" not in gym.registry:
    gym.register(id="dying/DyingCartPole-v1", entry_point=DyingCartPole, max_episode_steps=500)
'''
ENV = ["env=gym", "env.id=dying_env:dying/DyingCartPole-v1", "+env.kwargs.fail_at=700"]


def run_sweep(tmp_path: Path, *overrides: str) -> tuple[int, str, int]:
    """Run ``train.py -m hydra/launcher=joblib <overrides>`` into ``tmp_path/multirun`` (bounded); return
    its exit status, its stderr and its pid. Asserts that it left no process behind (its loky workers)."""
    (tmp_path / "dying_env.py").write_text(DYING_ENV)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)}
    cmd = [sys.executable, str(TRAIN), "-m", "hydra/launcher=joblib", *ENV, *SMALL, *overrides,
           f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    with started_session(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True) as proc:
        _, err = proc.communicate(timeout=400)
        deadline = time.monotonic() + 30
        while session_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = session_processes(proc.pid)
    assert not left, f"the sweep left processes behind: {sorted(left)}"
    return proc.returncode, err, proc.pid


def summary(sweep_dir: Path, job: int) -> dict:
    return json.loads((sweep_dir / str(job) / "summary.json").read_text())


def test_a_killed_job_fails_alone_and_the_jobs_beside_and_after_it_run_to_their_end(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    code, err, _ = run_sweep(tmp_path, "hydra.launcher.n_jobs=2", "seed=1,2,3,4", "+env.kwargs.job=0",
                             "+env.kwargs.how=kill")
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and "TerminatedWorkerError" not in err, err[-3000:]
    lines = err.strip().splitlines()
    why = (r"the job's process \(pid (\d+)\) was killed by SIGKILL while the job ran, as the out-of-memory killer "
           r"does when the machine runs out of memory \(`dmesg` says whether it did\): run fewer jobs at once "
           r"\(hydra.launcher.n_jobs\) or give them less to hold; "
           rf"trainer.resume={re.escape(str(sweep_dir / '0'))} continues it from its latest snapshot \(epoch_\d+\.pt\)")
    job_lines = [line for line in lines if line.startswith("[job 0] corral: error: ")]
    assert len(job_lines) == 1, err[-3000:]
    said = re.fullmatch(r"\[job 0\] corral: error: " + why, job_lines[0])
    assert said is not None, job_lines[0]
    pid = int(said.group(1))
    assert re.fullmatch(rf"corral: job 0 \(.*seed=1 .*\) failed: {why}; the sweep ran its other jobs "
                        rf"\(`corral results {re.escape(str(sweep_dir))}` lists each one's status\)", lines[-1]), lines[-1]

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
