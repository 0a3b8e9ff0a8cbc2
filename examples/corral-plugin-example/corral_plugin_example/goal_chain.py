"""``env=goal_chain``: walk along a chain of cells to a goal cell; each goal is a task.

A tiny environment that still has everything a corral environment may have:

- a gymnasium id (``corral_plugin_example/GoalChain-v0``), so plain ``gymnasium.make`` works too;
- **tasks** for meta-RL: ``sample_tasks(n)`` returns ``n`` tasks (dicts ``{"goal": cell}``), drawn
  from the environment's own seeded RNG, and ``set_task(task)`` switches to one. A sampler applies
  a task to every worker's environments through an ``env_update`` callable: :class:`SetTask`;
- a config dataclass with help on every field, so ``corral plugins`` and
  ``python train.py --help`` describe it and ``env.n_states=9`` is validated by Hydra.

Observation: ``[position, goal] / (n_states - 1)`` (just ``[position]`` with ``observe_goal=false``);
actions: 0 = left, 1 = right; reward 1 on reaching the goal (which ends the episode), otherwise
``-step_penalty``. Episodes start in a random cell other than the goal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from corral import check
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError

ENV_ID = "corral_plugin_example/GoalChain-v0"
#: What corral's EnvFactory makes: ``module:id`` imports this module (and so registers the id)
#: in every worker process before ``gymnasium.make``.
FACTORY_ID = f"{__name__}:{ENV_ID}"


class GoalChainEnv(gym.Env):
    """A chain of ``n_states`` cells; reach ``goal``. Tasks: ``{"goal": cell}``."""

    metadata = {"render_modes": []}

    def __init__(self, n_states: int = 7, goal: Optional[int] = None, observe_goal: bool = True,
                 step_penalty: float = 0.01) -> None:
        if n_states < 2:
            raise ConfigError(f"env.n_states must be >= 2, got {n_states}")
        self.n_states = int(n_states)
        self.goal = self._check_goal(self.n_states - 1 if goal is None else goal)
        self.observe_goal = bool(observe_goal)
        self.step_penalty = float(step_penalty)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2 if observe_goal else 1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    # ------------------------------------------------------------------ tasks
    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[dict[str, int]]:
        """``n`` goals drawn with ``rng`` (corral's task samplers pass their own), else with this
        environment's RNG (seeded by ``reset(seed=...)``)."""
        goals = (rng if rng is not None else self.np_random).integers(0, self.n_states, size=n)
        return [{"goal": int(g)} for g in goals]

    def set_task(self, task: dict[str, int]) -> None:
        """Make ``task["goal"]`` the goal (from the next step on; normally set between episodes)."""
        self.goal = self._check_goal(task["goal"])

    def get_task(self) -> dict[str, int]:
        """The current task."""
        return {"goal": self.goal}

    def _check_goal(self, goal: int) -> int:
        if not 0 <= int(goal) < self.n_states:
            raise ConfigError(f"goal {goal} is outside the chain of {self.n_states} cells (0..{self.n_states - 1})")
        return int(goal)

    # ------------------------------------------------------------------ gymnasium API
    def _obs(self) -> np.ndarray:
        scale = self.n_states - 1
        values = [self.position / scale, self.goal / scale] if self.observe_goal else [self.position / scale]
        return np.asarray(values, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start in a random cell other than the goal."""
        super().reset(seed=seed)
        start = int(self.np_random.integers(0, self.n_states - 1))
        self.position = start if start < self.goal else start + 1
        return self._obs(), {"goal": self.goal}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Move one cell left (0) or right (1), staying on the chain."""
        move = 1 if int(action) == 1 else -1
        self.position = min(max(self.position + move, 0), self.n_states - 1)
        reached = self.position == self.goal
        reward = 1.0 if reached else -self.step_penalty
        return self._obs(), reward, reached, False, {"goal": self.goal}


class SetTask:
    """An ``env_update`` that sets a task on a worker's environments: picklable, so it reaches
    worker processes and Ray actors. ``sampler.obtain_samples(itr, n, params, SetTask(task))``."""

    def __init__(self, task: dict[str, int]) -> None:
        self.task = dict(task)

    def __call__(self, env: gym.Env) -> None:
        env.unwrapped.set_task(self.task)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"SetTask({self.task!r})"


@dataclass
class GoalChainConfig:
    """Settings of ``env=goal_chain``."""

    n_states: int = field(default=7, metadata=check(ge=2, help="number of cells in the chain"))
    goal: Optional[int] = field(default=None, metadata=check(ge=0, help="goal cell (default: the last one)"))
    observe_goal: bool = field(default=True, metadata={"help": "include the goal in the observation"})
    step_penalty: float = field(default=0.01, metadata=check(ge=0, help="reward subtracted for every step that misses the goal"))
    max_episode_length: Optional[int] = field(default=30, metadata=check(ge=1, help="steps before an episode is cut (TIMEOUT)"))


def build_goal_chain(config: GoalChainConfig) -> EnvFactory:
    """A picklable recipe for the configured environment (what corral ships to workers)."""
    kwargs: dict[str, Any] = {
        "n_states": config.n_states,
        "goal": config.goal,
        "observe_goal": config.observe_goal,
        "step_penalty": config.step_penalty,
    }
    if config.max_episode_length:
        kwargs["max_episode_steps"] = int(config.max_episode_length)
    return EnvFactory(FACTORY_ID, kwargs)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=GoalChainEnv, max_episode_steps=30)


__all__ = ["ENV_ID", "GoalChainConfig", "GoalChainEnv", "SetTask", "build_goal_chain"]
