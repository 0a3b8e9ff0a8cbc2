"""The Logger contract: where per-epoch statistics go."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping


class Logger(ABC):
    """Receives one dictionary of statistics per epoch."""

    @abstractmethod
    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Record the statistics of ``epoch``."""

    def close(self) -> None:
        """Flush and release files."""


__all__ = ["Logger"]
