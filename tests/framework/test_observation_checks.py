"""An environment whose observations do not fit its observation_space: every worker stops at the step that
returned one, with one line naming the environment, the observation and the space (corral's own check: no
traceback). Before, the run failed in the policy's matrix multiply (``matmul: ... size 4 is different from
5``) or in a buffer write (``could not broadcast input array from shape (5,) into shape (4,)``), under a
traceback of corral's frames, and the line named neither the environment nor the space."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import WorkerError
from corral.framework.worker import ObservationMismatch, Worker
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.samplers.local import LocalSampler
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.fragment import FragmentWorker
from corral.plugins.workers.vec import VecWorker
from corral.plugins.workers.vector import VectorWorker

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "corral.testing.faulty_envs:corral/WrongShapeCartPole-v1"
SMALL = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]
SPACE = "Box of shape (4,) and dtype float32"
FIX = "fix the environment, or its observation_space (a wrapper that changes observations must change the space too)"


def train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *SMALL, f"hydra.run.dir={tmp_path / 'run'}",
                           *overrides], cwd=tmp_path, capture_output=True, text=True, timeout=240)


def expected_line(kwargs: str, problem: str, where: str, who: str = "worker 0") -> str:
    return (f"corral: error: {who} raised ObservationMismatch: the environment EnvFactory('{ENV_ID}', "
            f"kwargs={{{kwargs}}}) returned {problem} {where}, but its observation_space is {SPACE}; {FIX} "
            "while sampling (obtain_samples)")


# ------------------------------------------------------------------------------------ end to end
@pytest.mark.parametrize("sampler", ["local", "multiprocessing"])
def test_train_py_names_the_environment_and_the_shape_in_one_line(tmp_path: Path, sampler: str) -> None:
    proc = train(tmp_path, "env=gym", f"env.id={ENV_ID}", "+env.kwargs.fail_at=10", f"sampler={sampler}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "matmul" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.rstrip().splitlines()[-1]
    if sampler == "multiprocessing":  # the worker process that got there first, and its pid
        line = re.sub(r"^corral: error: worker \d+ \(pid \d+\) ", "corral: error: worker 0 ", line)
    assert line == expected_line("'fail_at': 10", "an observation of shape (5,)", "at step 10 of an episode"), line


def test_train_py_vector_sync_names_the_environment_and_the_slot(tmp_path: Path) -> None:
    """The SyncVectorEnv raises first (``Output array is the wrong shape``): that is one line too."""
    proc = train(tmp_path, "env=gym", f"env.id={ENV_ID}", "+env.kwargs.fail_at=10", "worker=vector",
                 "worker.backend=sync", "worker.n_envs=4")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Output array" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.rstrip().splitlines()[-1] == expected_line(
        "'fail_at': 10", "an observation of shape (5,)", "in slot 0 of worker.backend=sync's VectorEnv")


# ------------------------------------------------------------------------------------ every worker
WORKERS: dict[str, tuple[type[Worker], dict[str, Any]]] = {
    "default": (DefaultWorker, {}),
    "vec": (VecWorker, {"n_envs": 2}),
    "fragment": (FragmentWorker, {"n_envs": 2}),
    "vector": (VectorWorker, {"n_envs": 2, "backend": "sync"}),
}


@pytest.mark.parametrize("name", list(WORKERS))
@pytest.mark.parametrize(("fail_kwargs", "problem"), [
    ({}, "an observation of shape (5,)"),
    ({"shape": [2, 2]}, "an observation of shape (2, 2)"),  # the right size, the wrong shape
    ({"extra": 0, "dtype": "U1"}, "an observation of dtype <U1"),  # the right shape, no numbers
])
def test_every_worker_names_the_observation_that_does_not_fit(name: str, fail_kwargs: dict[str, Any],
                                                              problem: str) -> None:
    torch.manual_seed(0)
    worker_class, worker_args = WORKERS[name]
    env = EnvFactory(ENV_ID, {"fail_at": 3, **fail_kwargs})
    policy = MLPPolicy(EnvSpec.from_env(gym.make("CartPole-v1")), hidden_sizes=(8,))
    sampler = LocalSampler(agents=policy, envs=env, max_episode_length=200, n_workers=1, seed=1,
                           worker_class=worker_class, worker_args=worker_args)
    try:
        with pytest.raises(WorkerError) as raised:
            sampler.obtain_samples(0, 100, policy.get_param_values())
    finally:
        sampler.shutdown_worker()
    assert isinstance(raised.value.__cause__, ObservationMismatch), raised.value
    assert raised.value.remote_traceback is None  # corral's own check: the line says where
    message = raised.value.message
    assert message.startswith(f"worker 0 raised ObservationMismatch: the environment EnvFactory('{ENV_ID}', "), message
    where = "in slot 0 of worker.backend=sync's VectorEnv" if name == "vector" else "at step 3 of an episode"
    assert f"returned {problem} {where}, but its observation_space is {SPACE}; " in message, message


def test_a_batch_of_the_wrong_shape_from_a_vector_env_is_named() -> None:
    """A VectorEnv that returns a batch of the wrong shape itself (no sub-environment to blame): one check per
    step call on the batched array."""

    class Wider(gym.vector.VectorWrapper):
        def step(self, actions: Any) -> Any:
            obs, *rest = self.env.step(actions)
            return (np.concatenate([obs, np.zeros((len(obs), 1), obs.dtype)], axis=1), *rest)

    worker = VectorWorker(seed=0, max_episode_length=200, n_envs=2, backend="sync")
    worker.update_env(Wider(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")))
    worker.update_agent(MLPPolicy(EnvSpec.from_env(gym.make("CartPole-v1")), hidden_sizes=(8,)))
    with pytest.raises(ObservationMismatch, match=re.escape(
            "returned observations of shape (5,) from a step of its VectorEnv, but its observation_space is")):
        worker.rollout()
    worker.shutdown()


def test_observations_that_fit_are_not_reported() -> None:
    """Lists, float64 arrays for a float32 space and Python ints for Discrete take the slow path and pass."""
    from corral.framework.worker import observation_problem

    box = gym.spaces.Box(-1, 1, (4,), np.float32)
    assert observation_problem([0.0, 1.0, 2.0, 3.0], box) is None
    assert observation_problem(np.zeros(4, np.float64), box) is None
    assert observation_problem(3, gym.spaces.Discrete(5)) is None
    assert observation_problem({"a": 1}, gym.spaces.Dict({"a": gym.spaces.Discrete(2)})) is None  # not checked
    assert observation_problem({"a": 1}, box) == "a dict"
    assert observation_problem(None, box) == "None"
    assert observation_problem(np.zeros((1, 4)), box) == "an observation of shape (1, 4)"  # would broadcast
