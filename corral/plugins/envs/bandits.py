"""``env=bandits``: multi-armed Bernoulli bandits (RL2's first benchmark; Duan et al. 2016, sec. 4.1).

A task is one bandit: ``n_arms`` success probabilities drawn uniformly from [0, 1]. Pulling arm
``a`` pays 1 with probability ``p[a]``, else 0. An episode is ``n_pulls`` pulls (default 1: with
``worker=rl2 worker.n_episodes_per_trial=10`` a trial is 10 pulls on one bandit, each pull one
episode, so the adaptation curve shows the reward of every pull). ``env.max_episode_length``, the
episode length of every meta-RL environment, sets it as well when ``env.n_pulls`` is not given
(``env.n_pulls`` is null unless given, so the two are told apart); given both, they must agree.
The observation is constant. An algorithm that sets no tasks runs the run's one bandit
(``env.task_seed``; see :mod:`corral.meta.task_envs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import gymnasium as gym
import numpy as np

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError
from corral.meta.task_envs import TaskEnvConfig, run_task, task_env_factory


class BernoulliBanditEnv(gym.Env):
    """``n_arms`` Bernoulli arms; tasks ``{"probs": array of n_arms}`` (the task protocol)."""

    metadata: dict[str, Any] = {"render_modes": []}  # gymnasium.Env declares it an instance attribute

    def __init__(self, n_arms: int = 5, task_seed: int = 0) -> None:
        if n_arms < 2:
            raise ConfigError(f"env.n_arms must be >= 2, got {n_arms}")
        self.n_arms = int(n_arms)
        self.task_seed = int(task_seed)
        self.action_space = gym.spaces.Discrete(self.n_arms)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self._obs = np.ones(1, dtype=np.float32)
        self.probs: np.ndarray | None = None

    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[dict[str, np.ndarray]]:
        """``n`` bandits with success probabilities uniform in [0, 1]."""
        rng = rng if rng is not None else self.np_random
        return [{"probs": rng.uniform(0.0, 1.0, size=self.n_arms)} for _ in range(int(n))]

    def set_task(self, task: dict[str, Any]) -> None:
        """Use the bandit ``task["probs"]``."""
        probs = np.asarray(task["probs"], dtype=np.float64)
        if probs.shape != (self.n_arms,) or (probs < 0).any() or (probs > 1).any():
            raise ValueError(f"a task needs {self.n_arms} probabilities in [0, 1], got {probs}")
        self.probs = probs

    def get_task(self) -> dict[str, np.ndarray] | None:
        """The current bandit (None before the first reset or ``set_task``)."""
        return None if self.probs is None else {"probs": self.probs.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (with the run's bandit, :func:`~corral.meta.task_envs.run_task`, if none was set)."""
        super().reset(seed=seed)
        if self.probs is None:
            self.set_task(run_task(self, self.task_seed))
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Pull arm ``action``."""
        assert self.probs is not None, "call reset() first"
        reward = float(self.np_random.random() < self.probs[int(action)])
        return self._obs.copy(), reward, False, False, {}


@dataclass
class BanditsEnvConfig(TaskEnvConfig):
    """Multi-armed Bernoulli bandits."""

    n_arms: int = field(default=5, metadata=check(ge=2, help="arms per bandit (k)"))
    n_pulls: Optional[int] = field(default=None, metadata=check(
        ge=1, help="pulls per episode, a bandit episode's length (null, the default: env.max_episode_length when "
                   "given, else 1; given both, they must agree); with worker=rl2 a trial is n_pulls * "
                   "worker.n_episodes_per_trial pulls"))

    episode_length_field: ClassVar[str | None] = "n_pulls"
    episode_length_what: ClassVar[str] = "a bandit episode's length (pulls per episode)"


def pulls_per_episode(config: BanditsEnvConfig) -> int:
    """A bandit episode's length: ``env.n_pulls`` when given, else ``env.max_episode_length`` when
    given, else 1 (the config's own check refuses the two given with different values)."""
    return int(config.n_pulls or config.max_episode_length or 1)


def build_bandits(config: BanditsEnvConfig) -> EnvFactory:
    """A picklable factory for the configured bandits."""
    if config.n_pulls is not None and config.n_pulls < 1:
        raise ConfigError(f"env.n_pulls must be >= 1, got {config.n_pulls}")
    return task_env_factory(f"{__name__}:BernoulliBanditEnv", config, pulls_per_episode(config), n_arms=config.n_arms)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=bandits``."""
    register("env", "bandits", build_bandits, config=BanditsEnvConfig,
             help="multi-armed Bernoulli bandits, one bandit per task (meta-RL)")
