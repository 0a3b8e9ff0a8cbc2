"""``env=half_cheetah_vel`` / ``env=half_cheetah_dir`` (skipped without MuJoCo, where they must say
what to install)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from corral.framework.config import config_of
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry

HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None


def build(name: str, **fields):
    reg = get_registry().get("env", name)
    return reg.factory(config_of(reg, fields))()


@pytest.mark.skipif(HAS_MUJOCO, reason="MuJoCo is installed")
@pytest.mark.parametrize("name", ["half_cheetah_vel", "half_cheetah_dir"])
def test_missing_mujoco_names_the_extra(name: str) -> None:
    with pytest.raises(ConfigError, match=r"\[mujoco\]"):
        build(name)


@pytest.mark.skipif(not HAS_MUJOCO, reason="needs MuJoCo (pip install 'corral[mujoco]')")
def test_velocity_task_reward() -> None:
    env = build("half_cheetah_vel")
    base = env.unwrapped
    tasks = base.sample_tasks(50, np.random.default_rng(0))
    assert all(0.0 <= t["velocity"] <= 3.0 for t in tasks)
    base.set_task({"velocity": 2.0})
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape)
    _, reward, _, _, info = env.step(action)
    assert reward == pytest.approx(-abs(info["forward_velocity"] - 2.0))


@pytest.mark.skipif(not HAS_MUJOCO, reason="needs MuJoCo (pip install 'corral[mujoco]')")
def test_direction_task_reward_and_rl2_inputs() -> None:
    env = build("half_cheetah_dir", rl2_inputs=True)
    base = env.unwrapped
    assert [t["direction"] for t in base.sample_tasks(4)] == [1.0, -1.0, 1.0, -1.0]
    base.set_task({"direction": -1.0})
    obs, _ = env.reset(seed=0)
    assert obs.shape == (17 + 6 + 2,)
    action = np.full(env.action_space.shape, 0.5)
    _, reward, _, _, info = env.step(action)
    assert reward == pytest.approx(-info["forward_velocity"] - 0.05 * float(np.sum(action**2)))
