"""Every hook a corral plugin may implement. Project name: ``corral``.

A plugin is a module or object with functions decorated by ``corral.hookimpl`` whose names match
these specs. Arguments are passed by name; implement only the ones you need.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

hookspec = pluggy.HookspecMarker("corral")
hookimpl = pluggy.HookimplMarker("corral")


@hookspec
def corral_register(register: Callable[..., None]) -> None:
    """Register components: call ``register(kind, name, factory, config=Dataclass, help="...")``."""


@hookspec
def corral_config_searchpath() -> list[str]:
    """Return ``pkg://`` or ``file://`` paths whose YAML (e.g. ``experiment/*.yaml``) Hydra should see."""


@hookspec
def corral_validate_config(cfg: "DictConfig") -> None:
    """Check the composed config before anything is built; raise ``ConfigError`` to reject it."""


@hookspec
def corral_run_start(trainer: Any, cfg: "DictConfig | None") -> None:
    """Called once when training starts (after a resume, too)."""


@hookspec
def corral_epoch_end(trainer: Any, epoch: int, stats: dict[str, float]) -> None:
    """Called after each epoch (``epoch`` an int) with its statistics (``stats["epoch"]`` and ``["env_steps"]``
    ints, ``train/*``, ``loss/*``, ``eval/*``, ``time/*`` floats; you may add entries before loggers see them)."""


@hookspec
def corral_run_end(trainer: Any, error: BaseException | None) -> None:
    """Called once when training ends, with the exception that ended it, if any."""


@hookspec
def corral_run_summary(log_dir: Path, summary: dict[str, Any]) -> None:
    """Called after ``python train.py`` wrote the run's ``summary.json`` (the loggers are closed by then)."""
