"""``env=pendulum``: gymnasium's Pendulum-v1."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.plugins.envs.gym import preset

PENDULUM_CONFIG, build = preset("pendulum", "Pendulum-v1", "gymnasium Pendulum-v1")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=pendulum``."""
    register("env", "pendulum", build, config=PENDULUM_CONFIG, help="gymnasium Pendulum-v1")
