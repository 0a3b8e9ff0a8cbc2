"""The environment, logger and config contract suites, run on corral's own options, and shown to
fail on the mistakes they exist to catch."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from corral import check
from corral.framework.env import EnvFactory
from corral.testing import AlgorithmContract, ConfigContract, EnvContract, LoggerContract
from corral.testing.contracts import config_problems


# ------------------------------------------------------------------ corral's own options pass
class TestCartpoleEnv(EnvContract):
    env = "cartpole"


class TestPendulumEnv(EnvContract):
    env = "pendulum"
    env_config = {"max_episode_length": 50}


class TestPointNavEnv(EnvContract):
    env = "point_nav"


class TestBanditsEnv(EnvContract):
    env = "bandits"


class TestAcrobotEnv(EnvContract):
    env = "acrobot"


class TestMountainCarContinuousEnv(EnvContract):
    env = "mountaincar_continuous"


needs_mujoco = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                  reason="needs MuJoCo: pip install 'corral[mujoco]'")


@needs_mujoco
class TestHalfCheetahEnv(EnvContract):
    env = "halfcheetah"


@needs_mujoco
class TestHalfCheetahVelEnv(EnvContract):
    env = "half_cheetah_vel"


@needs_mujoco
class TestHalfCheetahDirEnv(EnvContract):
    env = "half_cheetah_dir"


class TestEnvFromAFactory(EnvContract):
    env = EnvFactory("Acrobot-v1")


def make_mountain_car() -> gym.Env:
    return gym.make("MountainCar-v0")


class TestEnvFromAFunction(EnvContract):
    env = make_mountain_car  # taken as written, not bound as a method


class TestCSVLogger(LoggerContract):
    logger = "csv"


class TestConsoleLogger(LoggerContract):
    logger = "console"


class TestTensorBoardLogger(LoggerContract):
    logger = "tensorboard"


class TestPPOOnARegisteredEnvOption(AlgorithmContract):
    """AlgorithmContract on another environment than CartPole, named as a registered option."""

    algo_name = "ppo"
    algo_config = {"n_epochs": 1}
    env = "pendulum"
    env_config = {"max_episode_length": 50}
    max_episode_length = 50
    batch_size = 200


class TestVPGOnAnEnvFactory(AlgorithmContract):
    algo_name = "vpg"
    algo_config = {"vf_iters": 2}
    env = EnvFactory("Acrobot-v1")
    max_episode_length = 100
    batch_size = 200


class TestTrainerConfig(ConfigContract):
    kind, name = "trainer", "default"


# ------------------------------------------------------------------ and catch mistakes
class UnseededEnv(gym.Env):
    """Draws from an unseeded generator: the same seed does not give the same episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self.rng.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.rng.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


class BadRewardEnv(UnseededEnv):
    """Returns a reward that is not a number."""

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        return np.zeros(2, np.float32), "one", False, False, {}


def test_env_contract_catches_an_unseeded_env() -> None:
    class Suite(EnvContract):
        env = UnseededEnv

    with pytest.raises(AssertionError, match="the same seed and actions gave different episodes"):
        Suite().test_same_seed_same_episode()


def test_env_contract_catches_a_bad_reward() -> None:
    class Suite(EnvContract):
        env = BadRewardEnv

    with pytest.raises(AssertionError, match="reward 'one'"):
        Suite().test_reset_and_step_follow_the_gymnasium_api()


@dataclass
class BadDefaults:
    """A config whose default breaks its own declared range, and a numeric field with none."""

    learning_rate: float = field(default=0.0, metadata=check(gt=0, help="step size"))
    n_layers: int = 2


def test_config_contract_catches_a_default_outside_its_range() -> None:
    class Suite(ConfigContract):
        config_class = BadDefaults

    with pytest.raises(AssertionError) as info:
        Suite().test_config_defaults_satisfy_their_ranges()
    assert "BadDefaults.learning_rate must be > 0, got 0.0" in str(info.value)
    assert "BadDefaults.n_layers is numeric but declares no range" in str(info.value)
    assert config_problems(BadDefaults, "x", require_ranges=False) == ["x.learning_rate must be > 0, got 0.0"]


def test_worker_contract_checks_the_registered_config_of_its_class() -> None:
    from corral import VecWorker, hookimpl
    from corral.testing import WorkerContract, inline_plugin

    class BadVecWorker(VecWorker):
        """A registered worker whose config default breaks its own range."""

    @dataclass
    class BadVecConfig:
        n_envs: int = field(default=0, metadata=check(ge=1, help="environments"))

    class Plugin:
        @hookimpl
        def corral_register(self, register: Any) -> None:
            register("worker", "bad_vec", BadVecWorker, config=BadVecConfig)

    class Suite(WorkerContract):
        worker_class = BadVecWorker

    with inline_plugin(Plugin(), "bad_vec"):
        with pytest.raises(AssertionError, match=r"worker=bad_vec: worker.n_envs must be >= 1, got 0"):
            Suite().test_config_defaults_satisfy_their_ranges()
