"""The task protocol on environments (corral/framework/env.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from corral.framework.env import current_task_id, set_env_task, supports_tasks, task_env
from corral.framework.errors import ConfigError
from corral.lib.task_envs import make_task_env


def test_task_protocol_found_under_wrappers() -> None:
    env = make_task_env("corral.plugins.envs.point_nav:PointNavEnv", 20, rl2_inputs=True)
    assert supports_tasks(env)
    assert task_env(env) is env.unwrapped
    tasks = env.unwrapped.sample_tasks(3, np.random.default_rng(0))
    assert len(tasks) == 3
    assert current_task_id(env) == -1
    set_env_task(env, tasks[1], task_id=9)
    assert current_task_id(env) == 9
    assert np.array_equal(env.unwrapped.goal, tasks[1]["goal"])


def test_environment_without_tasks_is_a_clear_error() -> None:
    env = gym.make("CartPole-v1")
    assert not supports_tasks(env)
    with pytest.raises(ConfigError, match="has no tasks"):
        set_env_task(env, {"goal": 1})
