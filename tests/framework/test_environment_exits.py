"""``sys.exit()`` inside an environment, against a signal handler's SystemExit, under sampler=local.

Under the process samplers, an environment that calls ``sys.exit(0)`` ends its worker process and the
sampler says so. Under sampler=local the worker runs in the trainer's process: the SystemExit ended the
run with the code the environment gave (0: a failed run exiting as a success, summary.json saying
failed). It is a worker's failure now, in one line. A SystemExit that a signal handler raises (submitit's
requeue on SIGUSR2 exits the process that way) still ends the process as it asks, even when the signal
lands while an environment steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import WorkerError
from corral.framework.interrupts import raised_by_signal_handler
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.samplers.local import LocalSampler

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]


class SignallingCartPole(CartPoleEnv):
    """CartPole that sends its own process SIGUSR2 at step 5 (a scheduler's preemption notice)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 5:
            os.kill(os.getpid(), signal.SIGUSR2)
        return super().step(action)


class ExitingCartPole(CartPoleEnv):
    """CartPole whose step 5 calls ``sys.exit(0)``."""

    def step(self, action: Any) -> Any:
        if getattr(self, "steps", 0) == 4:
            sys.exit(0)
        self.steps = getattr(self, "steps", 0) + 1
        return super().step(action)


def sample_once(env_fn: Any) -> None:
    policy = MLPPolicy(EnvSpec.from_env(gym.make("CartPole-v1")), hidden_sizes=(8,))
    sampler = LocalSampler(agents=policy, envs=EnvFactory(env_fn), max_episode_length=200, n_workers=1, seed=1)
    try:
        sampler.obtain_samples(0, 100, policy.get_param_values())
    finally:
        sampler.shutdown_worker()


@pytest.fixture
def requeue_handler() -> Iterator[None]:
    """A SIGUSR2 handler that exits the process with 144, as submitit's requeue does."""
    def requeue(signum: int, frame: Any) -> None:
        sys.exit(144)

    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_a_signal_handlers_system_exit_passes_the_local_sampler(requeue_handler: None) -> None:
    with pytest.raises(SystemExit) as raised:
        sample_once(SignallingCartPole)
    assert raised.value.code == 144
    assert raised_by_signal_handler(raised.value)


def test_an_environments_system_exit_is_a_worker_failure(requeue_handler: None) -> None:
    with pytest.raises(WorkerError) as raised:
        sample_once(ExitingCartPole)
    assert str(raised.value).startswith("worker 0 raised SystemExit: 0 while sampling (obtain_samples)"), raised.value
    assert isinstance(raised.value.__cause__, SystemExit)
    assert not raised_by_signal_handler(raised.value.__cause__)


def test_train_py_with_an_exiting_environment_fails_in_one_line(tmp_path: Path) -> None:
    """Before: exit code 0 and no line."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *SMALL, f"hydra.run.dir={tmp_path / 'run'}",
                           "env=gym", "env.id=corral.testing.faulty_envs:corral/ExitingCartPole-v1",
                           "+env.kwargs.fail_at=30", "sampler=local"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "corral: error: worker 0 raised SystemExit: 0 while sampling (obtain_samples); the traceback above "
        "shows where it raised"), proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("WorkerError: worker 0 raised SystemExit")
