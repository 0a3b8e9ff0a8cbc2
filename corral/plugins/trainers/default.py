"""``trainer=default``: corral's epoch trainer (logging, evaluation, snapshots, resume)."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.framework.trainer import Trainer, TrainerConfig


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``trainer=default``."""
    register("trainer", "default", Trainer, config=TrainerConfig,
             help="epochs of batch_size steps; logs, evaluation, atomic snapshots, resume")
