"""``env=point_nav``: PEARL's point robot, dense and sparse."""

from __future__ import annotations

import numpy as np
import pytest

from corral.framework.config import config_of
from corral.framework.env import EnvSpec
from corral.framework.plugins import get_registry
from corral.plugins.envs.point_nav import PointNavEnv


def test_registered_option_has_20_step_episodes() -> None:
    reg = get_registry().get("env", "point_nav")
    env = reg.factory(config_of(reg, {}))()
    assert EnvSpec.from_env(env).max_episode_length == 20
    env = reg.factory(config_of(reg, {"rl2_inputs": True, "max_episode_length": 7}))()
    assert EnvSpec.from_env(env).max_episode_length == 7 and env.observation_space.shape == (2 + 2 + 2,)


def test_goals_lie_on_the_upper_half_circle() -> None:
    goals = np.array([t["goal"] for t in PointNavEnv().sample_tasks(200, np.random.default_rng(0))])
    assert np.allclose(np.linalg.norm(goals, axis=1), 1.0)
    assert (goals[:, 1] >= 0).all() and goals[:, 0].min() < -0.9 and goals[:, 0].max() > 0.9


def test_dense_and_sparse_rewards_and_clipped_moves() -> None:
    for sparse in (False, True):
        env = PointNavEnv(sparse=sparse)
        env.set_task({"goal": np.array([0.0, 1.0])})
        obs, _ = env.reset(seed=0)
        assert np.array_equal(obs, [0, 0])
        rewards, infos = [], []
        for _ in range(10):
            obs, r, terminated, truncated, info = env.step(np.array([0.0, 5.0]))  # clipped to 0.1
            rewards.append(r)
            infos.append(info)
            assert not terminated and not truncated
        assert np.allclose(obs, [0, 1.0], atol=1e-6)
        if sparse:
            assert rewards[0] == 0.0 and infos[0]["success"] is False
            assert rewards[-1] == pytest.approx(1.0) and infos[-1]["success"] is True  # 1 - distance at the goal
            assert rewards[7] > 0.8  # within goal_radius 0.2
        else:
            assert np.allclose(rewards, [-(1.0 - 0.1 * (i + 1)) for i in range(10)], atol=1e-6)
