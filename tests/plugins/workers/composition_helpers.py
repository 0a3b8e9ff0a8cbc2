"""Composing ``train.py`` configs in tests of the composition checks."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from corral.framework.entry import prepare


def compose(*overrides: str) -> DictConfig:
    """What ``python train.py <overrides>`` composes."""
    args = prepare(list(overrides))
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        return hydra.compose(config_name="config", overrides=args)


def with_choices(base: list[str], *overrides: str) -> list[str]:
    """``base`` overrides with those of the same keys replaced by ``overrides`` (and the rest added)."""
    keys = {o.split("=")[0] for o in overrides}
    return [o for o in base if o.split("=")[0] not in keys] + list(overrides)
