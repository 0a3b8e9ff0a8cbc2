"""Sweep jobs that die, for the launcher tests (test_joblib_job_death.py, test_launcher_job_death.py).

:data:`DYING_ENV` is a module the jobs import (written into the test's ``tmp_path``): an environment
that kills its own process at a given step, only in the sweep's job number ``job`` (no timing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from corral.testing.processes import session_left, session_processes, started_session

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


def run_sweep(tmp_path: Path, launcher: str, *overrides: str) -> tuple[int, str, int]:
    """Run ``train.py -m hydra/launcher=<launcher> <overrides>`` with the jobs' environment :data:`DYING_ENV`
    into ``tmp_path/multirun`` (bounded); return its exit status, its stderr and its pid. Asserts that it
    left no process behind (its workers, its jobs' processes)."""
    (tmp_path / "dying_env.py").write_text(DYING_ENV)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)}
    cmd = [sys.executable, str(TRAIN), "-m", f"hydra/launcher={launcher}", *ENV, *SMALL, *overrides,
           f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    with started_session(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True) as proc:
        _, err = proc.communicate(timeout=400)
        left = session_left(proc.pid, 30)
    assert not left, f"the sweep left processes behind: {sorted(left)}"
    return proc.returncode, err, proc.pid


def summary(sweep_dir: Path, job: int) -> dict:
    """Job ``job``'s summary.json."""
    return json.loads((sweep_dir / str(job) / "summary.json").read_text())


def dead_job_pid(err: str, sweep_dir: Path, why: str) -> int:
    """The pid job 0's one ``[job 0] corral: error: <why>`` line names (``why``: a regular expression
    whose first group is the pid), after checking that the sweep's last line is corral's for that job."""
    lines = err.strip().splitlines()
    job_lines = [line for line in lines if line.startswith("[job 0] corral: error: ")]
    assert len(job_lines) == 1, err[-3000:]
    said = re.fullmatch(r"\[job 0\] corral: error: " + why, job_lines[0])
    assert said is not None, job_lines[0]
    assert re.fullmatch(rf"corral: job 0 \(.*seed=1.*\) failed: {why}; the sweep ran its other jobs "
                        rf"\(`corral results {re.escape(str(sweep_dir))}` lists each one's status\)", lines[-1]), \
        lines[-1]
    return int(said.group(1))


#: Seconds the processes of a sweep may take to be gone once it has exited (:func:`run_watched_sweep`).
GONE_WITHIN_S = 5.0


def run_watched_sweep(tmp_path: Path, modules: dict[str, str], *overrides: str,
                      limit_s: float = 400.0) -> tuple[int, str, dict[int, int]]:
    """Run ``train.py -m <overrides>`` into ``tmp_path/multirun`` (at most ``limit_s`` seconds), with ``modules``
    (module name -> source, such as ``{"dying_env": DYING_ENV}``) written into ``tmp_path`` for the jobs to
    import, watching its session's processes; return its exit status, its stderr and every process seen in its
    session while it ran (pid -> parent pid). Asserts that none of them runs :data:`GONE_WITHIN_S` seconds after the
    sweep exited; whatever still runs when it returns or fails is stopped (``started_session``)."""
    from corral.parallel.process_tree import proc_stat
    from corral.testing.processes import wait_gone

    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)}
    cmd = [sys.executable, str(TRAIN), "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    seen: dict[int, int] = {}
    err_path = tmp_path / "stderr"
    with err_path.open("w") as err_file, started_session(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                                          stderr=err_file) as proc:
        deadline = time.monotonic() + limit_s
        while proc.poll() is None:
            assert time.monotonic() < deadline, \
                f"the sweep did not end within {limit_s:g} s: {err_path.read_text()[-3000:]}"
            for pid in session_processes(proc.pid):
                stat = proc_stat(pid)
                if stat is not None:
                    seen.setdefault(pid, stat[0])
            time.sleep(0.1)
        left = wait_gone(set(seen), timeout=GONE_WITHIN_S)
        assert not left, f"running {GONE_WITHIN_S:g} s after the sweep exited: {sorted(left)}"
    return proc.returncode, err_path.read_text(), seen
