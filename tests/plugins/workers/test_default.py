"""DefaultWorker: one environment, one step at a time."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec, child_seed, seed_int
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.workers.default import DefaultWorker


def make_worker(env_id: str = "CartPole-v1", seed: int = 0, max_episode_length: int = 200) -> DefaultWorker:
    torch.manual_seed(0)
    policy = MLPPolicy(EnvSpec.from_env(gym.make(env_id)), hidden_sizes=(16, 16))
    worker = DefaultWorker(seed=seed, max_episode_length=max_episode_length)
    worker.update_env(EnvFactory(env_id))
    worker.update_agent(policy)
    return worker


def test_rollout_is_one_whole_episode() -> None:
    b = make_worker().rollout()
    assert b.n_episodes == 1 and b.complete.all()
    assert b.step_types[0] == StepType.FIRST and b.step_types[-1] == StepType.TERMINAL
    assert b.agent_infos["log_prob"].shape == (len(b),)
    assert (b.agent_infos["log_prob"] < 0).all()


def test_n_episodes_and_min_steps() -> None:
    b = make_worker().rollout(n_episodes=4)
    assert b.n_episodes == 4 and b.complete.all()
    b = make_worker().rollout(min_steps=100)
    assert len(b) >= 100 and b.complete.all()
    assert len(b) - b.lengths[-1] < 100  # it stopped as soon as it had enough


@pytest.mark.parametrize("env_id, limit", [("CartPole-v1", 200), ("Pendulum-v1", 40)])
def test_recorded_episode_replays_in_a_fresh_env(env_id: str, limit: int) -> None:
    """observations[t] is what actions[t] was taken in; rewards and last_observation follow."""
    worker = make_worker(env_id, seed=9, max_episode_length=limit)
    episodes = worker.rollout(n_episodes=2)
    env = gym.make(env_id)
    reset_seed = seed_int(child_seed(child_seed(np.random.SeedSequence(9), 0), 0))
    for i, ep in enumerate(episodes.split()):
        obs, _ = env.reset(seed=reset_seed) if i == 0 else env.reset()
        for t in range(len(ep)):
            np.testing.assert_array_equal(ep.observations[t], obs)
            action = ep.actions[t]
            obs, reward, terminated, truncated, _ = env.step(action if env_id == "CartPole-v1" else np.clip(action, -2, 2))
            assert ep.rewards[t] == np.float32(reward)
        np.testing.assert_array_equal(ep.last_observations[0], obs)
        expected_end = StepType.TERMINAL if terminated else StepType.TIMEOUT
        assert ep.step_types[-1] == expected_end
        if env_id == "Pendulum-v1":
            assert len(ep) == limit and expected_end == StepType.TIMEOUT


def test_step_by_step_api_matches_rollout() -> None:
    a, b = make_worker(seed=4), make_worker(seed=4)
    a.start_episode()
    with pytest.raises(RuntimeError, match="not ended"):
        a.collect_episode()
    steps = 1
    while not a.step_episode():
        steps += 1
    ep = a.collect_episode()
    assert len(ep) == steps
    assert ep.equals(b.rollout())


def test_successive_rollouts_continue_the_streams() -> None:
    worker = make_worker(seed=1)
    first, second = worker.rollout(), worker.rollout()
    assert not first.equals(second)
    again = make_worker(seed=1)
    assert EpisodeBatch.concatenate(again.rollout(), again.rollout()).equals(
        EpisodeBatch.concatenate(first, second)
    )


def test_shutdown_closes_the_env() -> None:
    worker = make_worker()
    worker.rollout()
    worker.shutdown()
    assert worker.envs == []
