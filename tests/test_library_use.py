"""Library use, as in garage's guides: build the parts in Python, hand them to a Trainer."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np


def test_python_api_trains_ppo_on_cartpole(tmp_path: Path) -> None:
    from corral import PPO, EnvFactory, EnvSpec, LocalSampler, MLPPolicy, Trainer, VecWorker

    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())
    policy = MLPPolicy(spec, hidden_sizes=(64, 64))
    sampler = LocalSampler(
        agents=policy,
        envs=env,
        max_episode_length=500,
        n_workers=2,
        worker_class=VecWorker,
        worker_args=dict(n_envs=4),
        seed=1,
    )
    algo = PPO(spec, policy, sampler, seed=1)
    trainer = Trainer(snapshot_dir=tmp_path)
    trainer.setup(algo, env)
    first = trainer.train(n_epochs=1, batch_size=2048)
    last = trainer.train(n_epochs=12, batch_size=2048)
    # Real learning: a random CartPole policy averages ~20; PPO is far above that after 12 epochs.
    assert first["train/return_mean"] < 60
    assert last["train/return_mean"] > 150, last
    assert trainer.total_env_steps >= 12 * 2048
    assert (tmp_path / "snapshots" / "latest").is_file()


def test_sampler_from_worker_factory_with_a_live_gym_env() -> None:
    from corral import LocalSampler, MLPPolicy, WorkerFactory
    from corral.framework.env import EnvSpec

    env = gym.make("CartPole-v1")  # a live environment is deep-copied per worker slot
    policy = MLPPolicy(EnvSpec.from_env(env))
    factory = WorkerFactory(seed=5, max_episode_length=100, n_workers=4)
    with LocalSampler.from_worker_factory(factory, agents=policy, envs=env) as sampler:
        batch = sampler.obtain_exact_episodes(2, policy.get_param_values())
    assert batch.n_episodes == 8
    assert np.all(batch.lengths <= 100)
    assert sampler.total_env_steps == len(batch)
