"""``logger=console``: one readable line per epoch on stdout."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TextIO

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.logger import Logger


@dataclass
class ConsoleLoggerConfig:
    """Settings of the console logger."""

    every: int = field(default=1, metadata=check(ge=1, help="print every N epochs"))
    losses: bool = field(default=True, metadata={"help": "also print loss/* entries"})


class ConsoleLogger(Logger):
    """``epoch   3 | steps    8,192 | return  45.3 [12, 120] | len  45.3 | eval 80.1 | 8,123 steps/s``."""

    def __init__(self, config: ConsoleLoggerConfig | None = None, stream: TextIO | None = None) -> None:
        self.config = config or ConsoleLoggerConfig()
        self.stream = stream or sys.stdout

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Print one line."""
        if self.config.every > 1 and epoch % self.config.every:
            return
        parts = [f"epoch {epoch:4d}", f"steps {int(stats.get('env_steps', 0)):>10,}"]
        if "train/return_mean" in stats:
            parts.append(
                f"return {stats['train/return_mean']:8.2f} [{stats['train/return_min']:.1f}, {stats['train/return_max']:.1f}]"
            )
            parts.append(f"len {stats['train/episode_length']:6.1f}")
        if "eval/return_mean" in stats:
            parts.append(f"eval {stats['eval/return_mean']:8.2f}")
        if "time/steps_per_s" in stats:
            parts.append(f"{stats['time/steps_per_s']:>8,.0f} steps/s")
        if self.config.losses:
            parts += [f"{k.split('/', 1)[1]} {v:.4g}" for k, v in stats.items() if k.startswith("loss/")]
        print(" | ".join(parts), file=self.stream, flush=True)


def build_console_logger(config: ConsoleLoggerConfig | None, *, log_dir: Path | None = None) -> ConsoleLogger:
    """Build the console logger."""
    return ConsoleLogger(config)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=console``."""
    register("logger", "console", build_console_logger, config=ConsoleLoggerConfig, help="one line per epoch on stdout")
