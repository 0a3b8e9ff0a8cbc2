"""``normalize=running`` (the default): running observation normalisation and reward scaling,
off until ``normalize.obs=true`` / ``normalize.reward=true``; see :mod:`corral.rl.normalization`."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.framework.errors import ConfigError
from corral.rl.normalization import NormalizeConfig, build_normalization


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``normalize=running``."""
    register("normalize", "running", build_normalization, config=NormalizeConfig,
             help="running mean/std observation normalisation and discounted-return reward scaling (VecNormalize)")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """``normalize.update=false`` freezes the statistics of the run a resume continues
    (``trainer.resume=<run>``). A new run has none to freeze: its statistics would stay at mean 0
    and variance 1 and nothing would be normalised, so it is refused before anything starts, for
    ``normalize=running`` and any option built the same way."""
    from corral.framework.plugins import get_registry

    node = cfg.get("normalize") if hasattr(cfg, "get") else None
    if node is None or not hasattr(node, "get") or "name" not in node:
        return
    if get_registry().get("normalize", node.name).factory is not build_normalization:
        return
    normalising = [f"normalize.{key}=true" for key in ("obs", "reward") if node.get(key) is True]
    trainer = cfg.get("trainer")
    resume = trainer.get("resume") if trainer is not None and hasattr(trainer, "get") else None
    if node.get("update") is False and normalising and not resume:
        raise ConfigError(
            f"normalize.update=false keeps a resumed run's statistics frozen, but this is a new run "
            f"({' '.join(normalising)}, no trainer.resume): it has no statistics to freeze, so they would stay at "
            "mean 0 and variance 1 and nothing would be normalised; leave normalize.update=true, or give it with "
            "trainer.resume=<run> to freeze that run's statistics"
        )
