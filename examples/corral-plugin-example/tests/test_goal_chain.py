"""env=goal_chain: a valid gymnasium environment with tasks, and its config checks."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from corral import DefaultWorker
from corral.framework.compose import validate
from corral.framework.errors import ConfigError
from corral.testing import EnvContract
from corral.testing.contracts import make_test_policy
from corral_plugin_example.goal_chain import ENV_ID, GoalChainConfig, GoalChainEnv, SetTask, build_goal_chain


def test_passes_gymnasiums_env_checker() -> None:
    check_env(GoalChainEnv(), skip_render_check=True)
    env = gym.make(ENV_ID)
    assert env.spec is not None and env.spec.max_episode_steps == 30
    env.close()


def test_walking_right_reaches_the_default_goal() -> None:
    env = GoalChainEnv(n_states=5)
    env.reset(seed=0)
    for _ in range(5):
        _, reward, terminated, truncated, _ = env.step(1)
        if terminated:
            break
    assert terminated and reward == 1.0 and not truncated


def test_tasks_are_seeded_and_settable() -> None:
    env = GoalChainEnv(n_states=9)
    env.reset(seed=4)
    tasks = env.sample_tasks(6)
    again = GoalChainEnv(n_states=9)
    again.reset(seed=4)
    assert again.sample_tasks(6) == tasks
    assert all(0 <= t["goal"] < 9 for t in tasks)
    env.set_task({"goal": 2})
    assert env.get_task() == {"goal": 2}
    obs, _ = env.reset()
    assert obs[1] == pytest.approx(2 / 8)
    with pytest.raises(ConfigError, match="outside the chain"):
        env.set_task({"goal": 9})


def test_set_task_is_an_env_update_workers_apply() -> None:
    """What a sampler broadcasts: a picklable callable applied to each worker's environment."""
    factory = build_goal_chain(GoalChainConfig(n_states=6))
    env = factory()
    from corral.framework.env import EnvSpec

    worker = DefaultWorker(seed=1, max_episode_length=30)
    try:
        worker.update_env(factory)
        worker.update_agent(make_test_policy(EnvSpec.from_env(env)))
        update = pickle.loads(pickle.dumps(SetTask({"goal": 0})))
        worker.update_env(update)
        assert worker.envs[0].unwrapped.goal == 0
        batch = worker.rollout(n_episodes=3)
        assert (batch.observations[:, 1] == 0.0).all()
    finally:
        worker.shutdown()
        env.close()


def test_validation_hook_rejects_a_goal_outside_the_chain(corral_compose) -> None:
    cfg = corral_compose("env=goal_chain", "env.n_states=4", "env.goal=7")
    with pytest.raises(ConfigError, match=r"env.goal=7 is outside the chain: with env.n_states=4 choose 0..3"):
        validate(cfg)
    validate(corral_compose("env=goal_chain", "env.n_states=4", "env.goal=3"))


class TestGoalChainEnvContract(EnvContract):
    """corral's environment contract: gymnasium API, same seed same episode, picklable, samples under
    corral's workers, tasks, config defaults inside their declared ranges."""

    env = "goal_chain"
