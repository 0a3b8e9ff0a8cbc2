"""``env=halfcheetah``: gymnasium's MuJoCo HalfCheetah-v5 (needs ``pip install 'corral[mujoco]'``)."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.plugins.envs.gym import preset

HALFCHEETAH_CONFIG, build = preset("halfcheetah", "HalfCheetah-v5", "gymnasium MuJoCo HalfCheetah-v5")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=halfcheetah`` (building it needs the ``mujoco`` extra)."""
    register("env", "halfcheetah", build, config=HALFCHEETAH_CONFIG,
             help="gymnasium MuJoCo HalfCheetah-v5 (pip install 'corral[mujoco]')")
