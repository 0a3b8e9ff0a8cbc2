"""A CartPole that warns, for tests/framework/test_warning_lines.py: ``env=gym
env.id=warning_env:corral_test/WarningCartPole-v1`` with ``tests/conf`` on ``PYTHONPATH``.

Its first ``reset`` gives a third-party-style ``warnings.warn`` (a ``UserWarning`` whose message spans
two lines), as a library's deprecation or a gymnasium note would, from a module outside corral.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

#: The warning's message (two lines: a one-line warning joins them).
MESSAGE = "test: the pole is painted red\nrepaint it before the next run"


class WarningCartPole(CartPoleEnv):
    """CartPole whose first ``reset`` warns once (a ``UserWarning`` from this module)."""

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        """Warn (Python's default filter shows it once per process), then CartPole's reset."""
        warnings.warn(MESSAGE, UserWarning, stacklevel=1)
        return super().reset(*args, **kwargs)


if "corral_test/WarningCartPole-v1" not in gym.registry:
    gym.register(id="corral_test/WarningCartPole-v1", entry_point=WarningCartPole, max_episode_steps=500)
