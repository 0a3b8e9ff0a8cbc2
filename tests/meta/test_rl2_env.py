"""The RL2 environment wrapper (corral/meta/rl2_env.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from corral.framework.errors import ConfigError
from corral.meta.rl2_env import CONTINUE_TRIAL, RL2Env, is_rl2_env
from corral.meta.task_envs import make_task_env


def test_discrete_actions_one_hot_reward_and_done_across_a_trial() -> None:
    env = make_task_env("corral.plugins.envs.bandits:BernoulliBanditEnv", 2, rl2_inputs=True, n_arms=3)
    assert is_rl2_env(env) and env.observation_space.shape == (6,)
    env.unwrapped.set_task({"probs": np.array([0.0, 1.0, 0.0])})
    obs, _ = env.reset(seed=0)
    assert np.array_equal(obs, [1, 0, 0, 0, 0, 0])  # a trial starts with zeros
    obs, r, *_ = env.step(1)
    assert r == 1.0 and np.array_equal(obs, [1, 0, 1, 0, 1, 0])  # previous action one-hot, reward, not done
    obs, r, _, truncated, _ = env.step(2)
    assert truncated and np.array_equal(obs, [1, 0, 0, 1, 0, 1])  # episode over: done = 1
    obs, _ = env.reset(options={CONTINUE_TRIAL: True})
    assert np.array_equal(obs, [1, 0, 0, 1, 0, 1])  # the next episode of the trial remembers
    obs, _ = env.reset()
    assert np.array_equal(obs, [1, 0, 0, 0, 0, 0])  # a new trial forgets
    assert env.observation_space.contains(obs)


def test_box_actions_are_copied() -> None:
    env = make_task_env("corral.plugins.envs.point_nav:PointNavEnv", 20, rl2_inputs=True)
    env.reset(seed=0)
    obs, r, *_ = env.step(np.array([0.05, -0.02], dtype=np.float32))
    assert obs.shape == (6,) and obs.dtype == np.float32
    assert np.allclose(obs[:2], [0.05, -0.02]) and np.allclose(obs[2:4], [0.05, -0.02])
    assert obs[4] == pytest.approx(r) and obs[5] == 0.0


def test_unsupported_spaces_are_rejected() -> None:
    assert not is_rl2_env(gym.make("CartPole-v1"))

    class DictObs(gym.Env):
        observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ConfigError, match="Box observation"):
        RL2Env(DictObs())
