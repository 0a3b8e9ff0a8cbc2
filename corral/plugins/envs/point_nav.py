"""``env=point_nav``: 2-D point-robot navigation to a goal (PEARL's point robot; Rakelly et al. 2019).

The robot starts at the origin; an action moves it by at most ``max_step`` per axis; the
observation is its position. A task is a goal on the half circle of radius ``goal_distance``
(angle uniform in [0, pi]). Dense reward: minus the distance to the goal. Sparse reward (as in
PEARL's sparse point robot): ``1 - distance`` inside ``goal_radius`` of the goal, else 0. The step
info always holds ``sparse_reward`` (PEARL infers the goal from it while learning from the dense
reward: ``worker.context_reward=sparse_reward``), ``distance`` and ``success``.
Episodes last 20 steps by default. ``env.goal_radius`` matters only where a reward depends on it
(``env.sparse=true``, or ``worker.context_reward=sparse_reward`` / ``success``): its ``applies_if``
says so, and given otherwise a warning says it has no effect.

An algorithm that sets no tasks runs the run's one goal (``env.task_seed``; see
:mod:`corral.meta.task_envs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError
from corral.meta.task_envs import TaskEnvConfig, run_task, task_env_factory

#: Steps per episode unless env.max_episode_length says otherwise (PEARL's point robot: 20).
EPISODE_LENGTH = 20
#: The step-info keys whose values depend on ``goal_radius``: a ``worker.context_reward`` that reads one
#: makes the radius count even with the dense reward.
RADIUS_INFO_KEYS = ("sparse_reward", "success")


class PointNavEnv(gym.Env):
    """Point robot; tasks ``{"goal": array of 2}`` (the task protocol). ``info["success"]``: within
    ``goal_radius`` of the goal."""

    metadata: dict[str, Any] = {"render_modes": []}  # gymnasium.Env declares it an instance attribute
    action_space: gym.spaces.Box

    def __init__(self, sparse: bool = False, goal_radius: float = 0.2, goal_distance: float = 1.0,
                 max_step: float = 0.1, task_seed: int = 0) -> None:
        self.sparse = bool(sparse)
        self.task_seed = int(task_seed)
        self.goal_radius = float(goal_radius)
        self.goal_distance = float(goal_distance)
        self.action_space = gym.spaces.Box(-max_step, max_step, shape=(2,), dtype=np.float32)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.goal: np.ndarray | None = None
        self._pos = np.zeros(2, dtype=np.float64)

    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[dict[str, np.ndarray]]:
        """``n`` goals on the upper half circle."""
        rng = rng if rng is not None else self.np_random
        angles = rng.uniform(0.0, np.pi, size=int(n))
        return [{"goal": self.goal_distance * np.array([np.cos(a), np.sin(a)])} for a in angles]

    def set_task(self, task: dict[str, Any]) -> None:
        """Navigate to ``task["goal"]``."""
        goal = np.asarray(task["goal"], dtype=np.float64)
        if goal.shape != (2,):
            raise ValueError(f"a point_nav task needs a 2-D goal, got {goal}")
        self.goal = goal

    def get_task(self) -> dict[str, np.ndarray] | None:
        """The current goal (None before the first reset or ``set_task``)."""
        return None if self.goal is None else {"goal": self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Back to the origin (with the run's goal, :func:`~corral.meta.task_envs.run_task`, if none was set)."""
        super().reset(seed=seed)
        if self.goal is None:
            self.set_task(run_task(self, self.task_seed))
        self._pos[:] = 0.0
        return self._pos.astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Move by ``action`` (clipped to the action bounds)."""
        assert self.goal is not None, "call reset() first"
        space = self.action_space
        self._pos += np.clip(np.asarray(action, dtype=np.float64).reshape(2), space.low, space.high)
        distance = float(np.linalg.norm(self._pos - self.goal))
        success = distance <= self.goal_radius
        sparse_reward = 1.0 - distance if success else 0.0
        reward = sparse_reward if self.sparse else -distance
        info = {"distance": distance, "success": success, "sparse_reward": sparse_reward}
        return self._pos.astype(np.float32), reward, False, False, info


@dataclass
class PointNavEnvConfig(TaskEnvConfig):
    """Point-robot navigation to a goal on a half circle."""

    sparse: bool = field(default=False, metadata={"help": "sparse reward (only within goal_radius of the goal)"})
    goal_radius: float = field(default=0.2, metadata=check(
        gt=0, applies_if=(("sparse", "==", True), *(("worker.context_reward", "==", key) for key in RADIUS_INFO_KEYS)),
        ignored_because="the dense reward is minus the distance to the goal",
        help="success radius around the goal: the sparse reward's (env.sparse=true, or "
             "worker.context_reward=sparse_reward); no effect on the dense reward"))
    goal_distance: float = field(default=1.0, metadata=check(gt=0, help="radius of the half circle the goals lie on"))


def build_point_nav(config: PointNavEnvConfig) -> EnvFactory:
    """A picklable factory for the configured point robot."""
    if config.goal_radius <= 0 or config.goal_distance <= 0:
        raise ConfigError("env.goal_radius and env.goal_distance must be positive")
    return task_env_factory(f"{__name__}:PointNavEnv", config, EPISODE_LENGTH, sparse=config.sparse,
                            goal_radius=config.goal_radius, goal_distance=config.goal_distance)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=point_nav``."""
    register("env", "point_nav", build_point_nav, config=PointNavEnvConfig,
             help="2-D point robot to a goal on a half circle, dense or sparse reward (meta-RL)")
