"""``env=cpu_heavy``: CartPole-v1 that burns a fixed amount of pure-Python work per step.

It stands in for simulators whose step costs far more than the policy's forward pass (about
400 microseconds per step on a 2-core laptop with the default ``work``), which is where parallel
samplers pay off. The work is a fixed number of loop iterations, not a timed spin, so it scales
with the machine like a real simulator would. Gymnasium id: ``corral/CPUHeavyCartPole-v1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral import hookimpl
from corral.plugins.envs.gym import GymEnvConfig, build_gym_env

ENV_ID = "corral/CPUHeavyCartPole-v1"


class CPUHeavyCartPole(CartPoleEnv):
    """CartPole whose ``step`` also runs ``work`` iterations of integer arithmetic in Python."""

    def __init__(self, work: int = 3000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work = int(work)

    def step(self, action: Any) -> Any:
        """A CartPole step plus the fixed Python work."""
        x = 1
        for _ in range(self.work):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        self._burned = x
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=CPUHeavyCartPole, max_episode_steps=500, reward_threshold=475.0)


@dataclass
class CPUHeavyEnvConfig(GymEnvConfig):
    """CartPole with extra per-step Python work."""

    id: str = field(default=f"{__name__}:{ENV_ID}",
                    metadata={"help": "gymnasium id of the CPU-heavy CartPole (module-qualified, so spawned "
                                      "worker processes import its registration)"})
    kwargs: dict[str, Any] = field(default_factory=lambda: {"work": 3000}, metadata={"help": "work: loop iterations per step"})


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=cpu_heavy``."""
    register("env", "cpu_heavy", build_gym_env, config=CPUHeavyEnvConfig,
             help="CartPole-v1 plus ~400us of Python work per step (benchmarks)")
