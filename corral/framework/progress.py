"""A one-line live progress bar on stderr (only drawn on a terminal)."""

from __future__ import annotations

import shutil
import sys
import time
from typing import Mapping, TextIO


class ProgressBar:
    """``epoch 12/50 [#######.....] 24,576 steps | 8,120 steps/s | return 187.3``."""

    def __init__(self, total: int, start: int = 0, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self._t0 = time.perf_counter()
        self._steps0: int | None = None
        self._line = ""
        self.update(start, 0, {})

    def update(self, epoch: int, env_steps: int, stats: Mapping[str, float]) -> None:
        """Redraw with the latest counters."""
        if self._steps0 is None:
            self._steps0 = env_steps
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        rate = (env_steps - self._steps0) / elapsed
        width = 24
        filled = int(width * min(epoch, self.total) / self.total)
        ret = stats.get("train/return_mean")
        parts = [
            f"epoch {epoch}/{self.total} [{'#' * filled}{'.' * (width - filled)}]",
            f"{env_steps:,} steps",
            f"{rate:,.0f} steps/s",
        ]
        if ret is not None:
            parts.append(f"return {ret:.1f}")
        line = " | ".join(parts)[: shutil.get_terminal_size((100, 20)).columns - 1]
        self._line = line
        self.stream.write("\r" + line)
        self.stream.flush()

    def clear(self) -> None:
        """Erase the bar (before other output is printed)."""
        if self._line:
            self.stream.write("\r" + " " * len(self._line) + "\r")
            self.stream.flush()

    def close(self) -> None:
        """Leave the last bar on screen and move to a new line."""
        if self._line:
            self.stream.write("\n")
            self.stream.flush()
            self._line = ""
