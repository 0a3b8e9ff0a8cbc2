"""``logger=tensorboard``: TensorBoard event files in ``<run dir>/tb``, x-axis = environment steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from corral import hookimpl
from corral.framework.logger import Logger


@dataclass
class TensorBoardLoggerConfig:
    """Settings of the TensorBoard logger."""

    subdir: str = field(default="tb", metadata={"help": "directory inside the run directory"})


class TensorBoardLogger(Logger):
    """Writes every statistic as a scalar against the environment-step count."""

    def __init__(self, log_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Add one scalar per statistic."""
        step = int(stats.get("env_steps", epoch))
        for key, value in stats.items():
            if key not in ("epoch", "env_steps"):
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Close the event file."""
        self.writer.close()


def build_tensorboard_logger(config: TensorBoardLoggerConfig, *, log_dir: Path | None = None) -> TensorBoardLogger:
    """Build the TensorBoard logger."""
    return TensorBoardLogger(Path(log_dir or ".") / config.subdir)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=tensorboard``."""
    register("logger", "tensorboard", build_tensorboard_logger, config=TensorBoardLoggerConfig,
             help="TensorBoard scalars in <run dir>/tb")
