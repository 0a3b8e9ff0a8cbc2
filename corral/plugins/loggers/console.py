"""``logger=console``: one readable line per epoch on stdout."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TextIO

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.logger import Logger, job_prefix, run_log


@dataclass
class ConsoleLoggerConfig:
    """Settings of the console logger."""

    every: int = field(default=1, metadata=check(ge=1, help="print every N epochs (and always the run's last epoch)"))
    losses: bool = field(default=True, metadata={"help": "also print loss/* entries"})


class ConsoleLogger(Logger):
    """``epoch   3 | steps    8,192 | return  45.3 [12, 120] | len  45.3 | eval 80.1 | 8,123 steps/s``."""

    def __init__(self, config: ConsoleLoggerConfig | None = None, stream: TextIO | None = None,
                 log_dir: Path | None = None, prefix: str = "") -> None:
        self.config = config or ConsoleLoggerConfig()
        self.stream = stream or sys.stdout
        #: Put before every line: ``[job 3] `` for a job of a multirun, so parallel jobs' lines can be told apart.
        self.prefix = prefix
        #: The same lines go to ``<log_dir>/corral.log``.
        self.log_dir = log_dir
        #: The line of the last epoch logged, while ``every`` skipped it: :meth:`flush` (on an interrupt,
        #: before the trainer's line that says so) or :meth:`close` prints it, so the run's last epoch
        #: (completed, interrupted or failed) always has its line, once, before the run's last words.
        self._unprinted: str | None = None

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Print one line (every ``every``-th epoch; a skipped last one when the logger closes)."""
        line = self.format_line(epoch, stats)
        if self.config.every > 1 and epoch % self.config.every:
            self._unprinted = line  # the row as it was committed, whatever is added to ``stats`` later
            return
        self._unprinted = None
        self._print(line)

    def flush(self) -> None:
        """Print the last epoch's line now if ``every`` skipped it (the run is stopping: the trainer
        calls this before it prints that the run was interrupted)."""
        if self._unprinted is not None:
            self._print(self._unprinted)
            self._unprinted = None  # printed: close() does not print it again

    def close(self) -> None:
        """Print the last epoch's line if ``every`` skipped it (the run ends there)."""
        self.flush()

    def format_line(self, epoch: int, stats: Mapping[str, float]) -> str:
        """The line of ``epoch``: steps, train return, episode length, eval return, speed, losses."""
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
        return " | ".join(parts)

    def _print(self, line: str) -> None:
        print(self.prefix + line, file=self.stream, flush=True)
        if self.log_dir is not None:
            run_log(self.log_dir).info(line)


def build_console_logger(config: ConsoleLoggerConfig | None, *, log_dir: Path | None = None) -> ConsoleLogger:
    """Build the console logger (its lines also go to ``<log_dir>/corral.log``)."""
    return ConsoleLogger(config, log_dir=log_dir, prefix=job_prefix())


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=console``."""
    register("logger", "console", build_console_logger, config=ConsoleLoggerConfig, help="one line per epoch on stdout")
