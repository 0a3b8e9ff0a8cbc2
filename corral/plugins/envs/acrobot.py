"""``env=acrobot``: gymnasium's Acrobot-v1."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.plugins.envs.gym import preset

ACROBOT_CONFIG, build = preset("acrobot", "Acrobot-v1", "gymnasium Acrobot-v1")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=acrobot``."""
    register("env", "acrobot", build, config=ACROBOT_CONFIG, help="gymnasium Acrobot-v1")
