"""``env=cartpole``: gymnasium's CartPole-v1."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.plugins.envs.gym import preset

CARTPOLE_CONFIG, build = preset("cartpole", "CartPole-v1", "gymnasium CartPole-v1")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=cartpole``."""
    register("env", "cartpole", build, config=CARTPOLE_CONFIG, help="gymnasium CartPole-v1")
