"""The task protocol on environments (corral/framework/env.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from corral.framework.env import (
    current_task_id,
    env_task_state,
    restore_env_task,
    set_env_task,
    supports_tasks,
    task_env,
)
from corral.framework.errors import ConfigError
from corral.meta.task_envs import make_task_env


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


@pytest.mark.parametrize("entry_point", ["corral.plugins.envs.point_nav:PointNavEnv",
                                         "corral.plugins.envs.bandits:BernoulliBanditEnv"])
def test_the_current_task_is_read_and_restored(entry_point: str) -> None:
    env = make_task_env(entry_point, 20)
    assert env_task_state(env) is None  # no task before the first reset
    env.reset(seed=3)
    task, task_id = env_task_state(env)
    assert task_id == -1  # drawn by the env itself, not given an id
    set_env_task(env, env.unwrapped.sample_tasks(1, np.random.default_rng(1))[0], task_id=4)
    state = env_task_state(env)
    other = make_task_env(entry_point, 20)
    restore_env_task(other, state)
    assert current_task_id(other) == 4
    assert str(env_task_state(other)) == str(state)
    restore_env_task(other, None)  # nothing to restore: unchanged
    assert current_task_id(other) == 4
    assert env_task_state(gym.make("CartPole-v1")) is None
