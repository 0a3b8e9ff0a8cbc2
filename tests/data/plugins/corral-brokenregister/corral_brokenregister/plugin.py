"""A plugin whose registration hook fails half-way: its partial registration must be dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral import LocalSampler, hookimpl


@dataclass
class PartialConfig:
    """Settings of the component registered before the failure."""

    n_workers: int = 1


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=brokenpartial``, then fail."""
    register("sampler", "brokenpartial", LocalSampler, config=PartialConfig, help="registered before the failure")
    # Two lines, as pluggy's and OmegaConf's errors have: corral's warning must still be one line.
    raise RuntimeError("corral_brokenregister exploded while registering\n    (the second line of its message)")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Would reject every run if this plugin stayed registered after its failure."""
    raise RuntimeError("the broken plugin's validation hook must never run")
