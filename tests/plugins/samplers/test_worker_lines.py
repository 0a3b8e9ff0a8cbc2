"""What every sampler's worker processes say, and do not say, the same way.

- An environment that returns NaN is named with the worker that sampled it (``worker 1's
  environment ... returned values no algorithm can learn from``), as every other worker failure
  line names its worker, under the local sampler, worker processes and the action server alike; it
  is still the trainer's :class:`~corral.framework.errors.EnvironmentValueError`, in one line.
- Worker processes print no gymnasium deprecation notes (``CartPole-v0 is out of date``), as the
  run's own process does not.
"""

from __future__ import annotations

import multiprocessing
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral import (
    ActionServerSampler,
    EnvFactory,
    EnvironmentValueError,
    EnvSpec,
    LocalSampler,
    MLPPolicy,
    MultiprocessingSampler,
)

ROOT = Path(__file__).resolve().parents[3]
NAN = "corral.testing.faulty_envs:corral/NaNCartPole-v1"
SMALL = ["trainer.batch_size=200", "trainer.eval_every=1", "trainer.eval_episodes=1", "trainer.progress=false",
         "trainer.max_env_steps=null", "logger=[console]", "trainer.n_epochs=1"]


@pytest.fixture(autouse=True)
def leaves_no_process_behind() -> Any:
    yield
    assert multiprocessing.active_children() == []


@pytest.fixture(scope="module")
def policy() -> MLPPolicy:
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))


def nan_line(worker: int, env: EnvFactory) -> str:
    """The start of the error of ``worker``'s NaN observations, up to what it found."""
    return (f"worker {worker}'s environment {env!r} returned values no algorithm can learn from (observations: "
            "NaN in ")


@pytest.mark.parametrize("sampler", ["local", "multiprocessing", "action_server"])
def test_nan_from_an_environment_names_the_worker(policy: MLPPolicy, sampler: str) -> None:
    """Under worker processes the fault is in worker 1's environment alone (``only_worker`` reads the
    worker number processes are given); under local, worker 0's environment is the first to return it.
    The line used to name the environment only, not which worker sampled it."""
    only = {} if sampler == "local" else {"only_worker": 1}
    env = EnvFactory(NAN, {"fail_at": 30, **only})
    cls: Any = {"local": LocalSampler, "multiprocessing": MultiprocessingSampler,
                "action_server": ActionServerSampler}[sampler]
    extra = {} if sampler == "local" else {"timeout": 60}
    if sampler == "action_server":
        extra["device"] = "cpu"
    worker = 0 if sampler == "local" else 1
    with cls(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, **extra) as s:
        with pytest.raises(EnvironmentValueError) as info:
            s.obtain_samples(0, 200, policy.get_param_values())
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(nan_line(worker, env)), message
    assert re.search(r"\) while sampling \(obtain_samples\); the run stopped before training on them: check the "
                     r"environment, or wrap it to end an episode whose state blew up$", message), message


def test_a_healthy_environment_samples_as_before(policy: MLPPolicy) -> None:
    env = EnvFactory(NAN, {"fail_at": 10_000})
    with LocalSampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1) as s:
        assert len(s.obtain_samples(0, 200, policy.get_param_values())) >= 200


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={cwd / 'run'}", *SMALL, *overrides],
                          cwd=cwd, capture_output=True, text=True, timeout=240)


def test_train_py_names_the_worker_whose_environment_returned_nan(tmp_path: Path) -> None:
    proc = train(tmp_path, "sampler=multiprocessing", "env=gym", f"env.id={NAN}", "+env.kwargs.fail_at=30",
                 "+env.kwargs.only_worker=1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("corral: error:")]
    assert errors == [proc.stderr.splitlines()[-1]], proc.stderr[-3000:]
    assert errors[0].startswith(
        f"corral: error: worker 1's environment EnvFactory('{NAN}', kwargs={{'fail_at': 30, 'only_worker': 1}}) "
        "returned values no algorithm can learn from (observations: NaN in "), errors[0]


def test_worker_processes_print_no_gymnasium_deprecation(tmp_path: Path) -> None:
    """``env.id=CartPole-v0``: the run's process prints none of gymnasium's ``is out of date`` notes, and
    each worker process printed one (two lines in ANSI colour)."""
    proc = train(tmp_path, "sampler=multiprocessing", "env=gym", "env.id=CartPole-v0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "out of date" not in proc.stderr and "DeprecationWarning" not in proc.stderr, proc.stderr[-3000:]
