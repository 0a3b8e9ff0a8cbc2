"""A one-line live progress bar on stderr (only drawn on a terminal)."""

from __future__ import annotations

import shutil
import sys
from typing import Mapping, TextIO


class ProgressBar:
    """``epoch 12/50 [#######.....] 24,576 steps | 8,120 steps/s | return 187.3``.

    The bar counts toward whichever limit ends the run first: with ``max_env_steps`` the binding
    one it reads ``epoch 12 [###....] 24,576/100,000 steps``. "steps/s" is the last epoch's
    ``time/steps_per_s`` (environment steps per second of the epoch's wall time), the same figure
    the console logger prints.
    """

    def __init__(self, n_epochs: int | None = None, max_env_steps: int | None = None, start_epoch: int = 0,
                 start_env_steps: int = 0, stream: TextIO | None = None) -> None:
        self.n_epochs = n_epochs
        self.max_env_steps = max_env_steps
        self.stream = stream or sys.stderr
        self._line = ""
        self.update(start_epoch, start_env_steps, {})

    def fraction(self, epoch: int, env_steps: int) -> tuple[float, str]:
        """How far the run is toward the limit it reaches first (0 to 1), and which limit that is."""
        by_epochs = epoch / self.n_epochs if self.n_epochs else 0.0
        by_steps = env_steps / self.max_env_steps if self.max_env_steps else 0.0
        return (by_steps, "max_env_steps") if by_steps > by_epochs else (by_epochs, "n_epochs")

    def update(self, epoch: int, env_steps: int, stats: Mapping[str, float]) -> None:
        """Redraw with the latest counters."""
        width = 24
        fraction, limit = self.fraction(epoch, env_steps)
        filled = int(width * min(max(fraction, 0.0), 1.0))
        bar = f"[{'#' * filled}{'.' * (width - filled)}]"
        if limit == "max_env_steps":
            parts = [f"epoch {epoch} {bar}", f"{env_steps:,}/{self.max_env_steps:,} steps"]
        else:
            total = f"/{self.n_epochs}" if self.n_epochs else ""
            parts = [f"epoch {epoch}{total} {bar}", f"{env_steps:,} steps"]
        if "time/steps_per_s" in stats:
            parts.append(f"{stats['time/steps_per_s']:,.0f} steps/s")
        ret = stats.get("train/return_mean")
        if ret is not None:
            parts.append(f"return {ret:.1f}")
        line = " | ".join(parts)[: shutil.get_terminal_size((100, 20)).columns - 1]
        self.clear()
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
