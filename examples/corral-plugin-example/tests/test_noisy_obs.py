"""worker=noisy_obs: corral's worker contract, plus what is special about this worker."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from corral import EnvFactory, LocalSampler, MultiprocessingSampler, VecWorker
from corral.testing import WorkerContract
from corral.testing.contracts import env_spec_of, make_test_policy
from corral_plugin_example.noisy_obs import NoisyObsWorker


class TestNoisyObsWorkerContract(WorkerContract):
    """Everything corral expects of a worker: valid episodes, exact counts, step types, seeding,
    snapshots, agent updates, shutdown."""

    worker_class = NoisyObsWorker
    worker_args = {"noise_std": 0.05, "n_envs": 2}


def rollout(worker_class: type, seed: int = 3, **worker_args: object):
    """Two rollouts' worth of episodes from a fresh worker on CartPole."""
    env = EnvFactory("CartPole-v1")
    policy = make_test_policy(env_spec_of(env))
    worker = worker_class(seed=seed, max_episode_length=100, **worker_args)
    try:
        worker.update_env(env)
        worker.update_agent(policy)
        return worker.rollout(min_steps=150)
    finally:
        worker.shutdown()


def test_zero_noise_is_exactly_the_vec_worker() -> None:
    plain = rollout(VecWorker, n_envs=2)
    assert rollout(NoisyObsWorker, n_envs=2, noise_std=0.0).differences(plain) == []
    assert "observations" in rollout(NoisyObsWorker, n_envs=2, noise_std=0.05).differences(plain)


def test_noise_does_not_come_from_the_global_rng() -> None:
    np.random.seed(0)
    a = rollout(NoisyObsWorker, n_envs=2, noise_std=0.05)
    np.random.seed(12345)
    b = rollout(NoisyObsWorker, n_envs=2, noise_std=0.05)
    assert a.differences(b) == []


def test_negative_noise_is_rejected() -> None:
    with pytest.raises(ValueError, match="noise_std"):
        NoisyObsWorker(seed=1, max_episode_length=10, noise_std=-1.0)


@pytest.mark.skipif(sys.platform == "win32", reason="worker processes are slow to start on Windows")
def test_same_noisy_episodes_in_worker_processes() -> None:
    """The noise generators live in the worker, so worker processes reproduce the local run."""
    env = EnvFactory("CartPole-v1")
    policy = make_test_policy(env_spec_of(env))
    kwargs = dict(max_episode_length=100, n_workers=2, seed=11, worker_class=NoisyObsWorker,
                  worker_args={"noise_std": 0.05, "n_envs": 2})
    params = policy.get_param_values()
    with LocalSampler(agents=policy, envs=env, **kwargs) as local, \
            MultiprocessingSampler(agents=policy, envs=env, timeout=60, **kwargs) as remote:
        assert remote.obtain_samples(0, 300, params).differences(local.obtain_samples(0, 300, params)) == []
