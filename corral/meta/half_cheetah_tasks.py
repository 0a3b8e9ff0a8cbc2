"""HalfCheetahVel and HalfCheetahDir (Finn et al. 2017; as in PEARL): gymnasium's MuJoCo
HalfCheetah-v5 with a task-dependent reward. Needs ``mujoco`` (``pip install 'corral[mujoco]'``).

- Vel: a task is a target forward velocity uniform in [0, 3]; reward
  ``-|forward velocity - target| - 0.05 * |action|^2``.
- Dir: a task is a direction +1 (forward) or -1 (backward); reward
  ``direction * forward velocity - 0.05 * |action|^2``.

With no task set, an environment runs the run's task (``task_seed``; see :mod:`corral.meta.task_envs`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv

from corral.meta.task_envs import run_task, task_generator

#: Control-cost weight of the meta-RL HalfCheetah tasks (PEARL: 0.5 * 1e-1).
CTRL_COST = 0.05


class _TaskCheetah(HalfCheetahEnv):
    """HalfCheetah-v5 whose reward depends on a task; ``task_seed`` picks the task it runs when none is set."""

    def __init__(self, task_seed: int = 0, **kwargs: Any) -> None:
        self.task_seed = int(task_seed)
        super().__init__(**kwargs)

    def _task_reward(self, forward_velocity: float) -> float:
        raise NotImplementedError

    def _default_task(self) -> dict[str, float]:
        """The run's task (:func:`~corral.meta.task_envs.run_task`)."""
        return run_task(self, self.task_seed)

    def set_task(self, task: dict[str, Any]) -> None:
        """Switch to ``task`` (each environment defines what a task holds)."""
        raise NotImplementedError

    # gymnasium annotates MujocoEnv.step with numpy scalars; this returns Env.step's Python types.
    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:  # type: ignore[override]
        """HalfCheetah's step with the task's reward."""
        if not getattr(self, "_has_task", False):
            self.set_task(self._default_task())
        obs, _, terminated, truncated, info = super().step(action)
        ctrl = CTRL_COST * float(np.sum(np.square(action)))
        velocity = float(info["x_velocity"])
        reward = self._task_reward(velocity) - ctrl
        info["forward_velocity"] = velocity
        return obs, reward, terminated, truncated, info


class HalfCheetahVelEnv(_TaskCheetah):
    """Run at a target velocity; tasks ``{"velocity": float}``."""

    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[dict[str, float]]:
        """``n`` target velocities uniform in [0, 3]."""
        rng = rng if rng is not None else self.np_random
        return [{"velocity": float(v)} for v in rng.uniform(0.0, 3.0, size=int(n))]

    def set_task(self, task: dict[str, Any]) -> None:
        """Run at ``task["velocity"]``."""
        self.goal_velocity = float(task["velocity"])
        self._has_task = True

    def get_task(self) -> dict[str, float] | None:
        """The current target velocity (None before a task is set or the first step)."""
        return {"velocity": self.goal_velocity} if getattr(self, "_has_task", False) else None

    def _task_reward(self, forward_velocity: float) -> float:
        return -abs(forward_velocity - self.goal_velocity)


class HalfCheetahDirEnv(_TaskCheetah):
    """Run forward or backward; tasks ``{"direction": +1.0 or -1.0}``."""

    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[dict[str, float]]:
        """``n`` directions, alternating forward and backward (there are only two tasks)."""
        return [{"direction": 1.0 if i % 2 == 0 else -1.0} for i in range(int(n))]

    def set_task(self, task: dict[str, Any]) -> None:
        """Run in ``task["direction"]``."""
        direction = float(task["direction"])
        if direction not in (1.0, -1.0):
            raise ValueError(f"a direction task is +1 or -1, got {direction}")
        self.direction = direction
        self._has_task = True

    def get_task(self) -> dict[str, float] | None:
        """The current direction (None before a task is set or the first step)."""
        return {"direction": self.direction} if getattr(self, "_has_task", False) else None

    def _default_task(self) -> dict[str, float]:
        """The run's direction: forward or backward, drawn with ``task_seed`` (``sample_tasks`` alternates,
        so its first task would always be forward)."""
        return {"direction": float(task_generator(self.task_seed).choice([1.0, -1.0]))}

    def _task_reward(self, forward_velocity: float) -> float:
        return self.direction * forward_velocity


__all__ = ["CTRL_COST", "HalfCheetahDirEnv", "HalfCheetahVelEnv"]
