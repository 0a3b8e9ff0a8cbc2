"""``env=bandits``: Bernoulli bandits with the task protocol."""

from __future__ import annotations

import numpy as np
import pytest

from corral.framework.config import config_of
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry
from corral.plugins.envs.bandits import BernoulliBanditEnv


def build(**fields):
    reg = get_registry().get("env", "bandits")
    return reg.factory(config_of(reg, fields))()


def test_registered_option_builds_bandits_with_episode_length_and_rl2_inputs() -> None:
    env = build(n_arms=3, n_pulls=4)
    spec = EnvSpec.from_env(env)
    assert spec.max_episode_length == 4 and spec.action_space.n == 3 and spec.observation_space.shape == (1,)
    wrapped = build(n_arms=3, rl2_inputs=True)
    assert wrapped.observation_space.shape == (1 + 3 + 2,)


def test_rewards_follow_the_task_probabilities() -> None:
    env = BernoulliBanditEnv(n_arms=3)
    env.reset(seed=0)
    env.set_task({"probs": np.array([0.0, 1.0, 0.25])})
    assert [env.step(0)[1] for _ in range(20)] == [0.0] * 20
    assert [env.step(1)[1] for _ in range(20)] == [1.0] * 20
    mean = np.mean([env.step(2)[1] for _ in range(4000)])
    assert abs(mean - 0.25) < 0.03


def test_sample_tasks_is_seeded_and_set_task_validates() -> None:
    env = BernoulliBanditEnv(n_arms=4)
    a = env.sample_tasks(5, np.random.default_rng(1))
    b = env.sample_tasks(5, np.random.default_rng(1))
    assert all(np.array_equal(x["probs"], y["probs"]) for x, y in zip(a, b))
    assert all(x["probs"].shape == (4,) and ((0 <= x["probs"]) & (x["probs"] <= 1)).all() for x in a)
    with pytest.raises(ValueError, match="4 probabilities"):
        env.set_task({"probs": [0.5, 0.5]})
    with pytest.raises(ConfigError, match="n_arms"):
        BernoulliBanditEnv(n_arms=1)
