"""``env=mountaincar_continuous``: gymnasium's MountainCarContinuous-v0."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.plugins.envs.gym import preset

MOUNTAINCAR_CONTINUOUS_CONFIG, build = preset("mountaincar_continuous", "MountainCarContinuous-v0", "gymnasium MountainCarContinuous-v0")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=mountaincar_continuous``."""
    register("env", "mountaincar_continuous", build, config=MOUNTAINCAR_CONTINUOUS_CONFIG, help="gymnasium MountainCarContinuous-v0")
