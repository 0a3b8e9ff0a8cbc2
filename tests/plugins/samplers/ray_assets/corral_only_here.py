"""A policy and an environment that exist only in this test directory: no Ray worker can import this
module unless the sampler's ``runtime_env`` ships it (tests/plugins/samplers/test_ray_runtime.py)."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral import MLPPolicy


class OnlyHerePolicy(MLPPolicy):
    """corral's MLP policy under another name, defined in this module only."""


class OnlyHereCartPole(CartPoleEnv):
    """CartPole under another name, defined in this module only."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
