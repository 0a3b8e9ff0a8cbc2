"""``normalize=running`` (the default): running observation normalisation and reward scaling,
off until ``normalize.obs=true`` / ``normalize.reward=true``; see :mod:`corral.rl.normalization`."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.rl.normalization import NormalizeConfig, build_normalization


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``normalize=running``."""
    register("normalize", "running", build_normalization, config=NormalizeConfig,
             help="running mean/std observation normalisation and discounted-return reward scaling (VecNormalize)")
