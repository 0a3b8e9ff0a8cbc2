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
    ints, ``train/*``, ``loss/*``, ``eval/*``, ``time/*`` floats; you may add entries before loggers see them).
    Entries you add must be numbers (int or float, numpy scalars too, which become Python's; not bool,
    str, arrays or tensors): anything else stops the run before the epoch is logged, in one line naming
    your plugin and the entry."""


@hookspec
def corral_run_end(trainer: Any, error: BaseException | None) -> None:
    """Called once when training ends, with the exception that ended it, if any."""


@hookspec
def corral_run_summary(log_dir: Path, summary: dict[str, Any]) -> None:
    """Called after ``python train.py`` wrote the run's ``summary.json`` and printed its closing line (the
    loggers are closed by then). An implementation that raises does not change the run's record. After
    a completed run, ``train.py`` ends with one ``corral: error:`` line saying the run completed, where
    its summary is and which plugin raised, and exits with status 2: the data is complete, but what the
    hook does with it did not happen. After a run that failed or was interrupted, that line is a
    ``corral: warning:`` and the run's own error and exit status stand."""
