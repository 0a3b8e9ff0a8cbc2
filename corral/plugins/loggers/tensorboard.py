"""``logger=tensorboard``: TensorBoard event files in ``<run dir>/tb``, x-axis = environment steps."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from corral import hookimpl
from corral.framework.checks import checked, inside_run_dir
from corral.framework.logger import Logger


@dataclass
@checked("logger.tensorboard")
class TensorBoardLoggerConfig:
    """Settings of the TensorBoard logger."""

    subdir: str = field(default="tb", metadata=inside_run_dir("directory inside the run directory"))


class TensorBoardLogger(Logger):
    """Writes every statistic as a scalar against the environment-step count.

    The event file is opened at the first row. A resumed run writes into the same directory with
    ``purge_step`` set just past the resumed environment step count, so TensorBoard hides what an
    interrupted session logged after its last snapshot and shows one continuous curve.
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._purge_step: int | None = None
        self._writer: Any = None

    @property
    def writer(self) -> Any:
        """The ``SummaryWriter`` (opened on first use)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            quiet_writer_thread_errors()
            self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=self._purge_step)
        return self._writer

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Add one scalar per statistic."""
        step = int(stats.get("env_steps", epoch))
        for key, value in stats.items():
            if key not in ("epoch", "env_steps"):
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def resume(self, epoch: int, env_steps: int) -> None:
        """Hide events past ``env_steps`` (they belong to epochs the run logs again)."""
        self.close()
        self._purge_step = env_steps + 1

    def log_video(self, epoch: int, path: Path, stats: Mapping[str, float]) -> None:
        """The evaluation video as a TensorBoard video (an animated GIF, tag ``eval/video``), as
        ``SummaryWriter.add_video`` writes it (which needs moviepy 1, this takes any corral[video])."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from corral.framework.evaluation import encode_gif, read_video_frames

        frames = read_video_frames(path)[:, ::2, ::2]  # half size: TensorBoard keeps the whole GIF in memory
        image = Summary.Image(height=frames.shape[1], width=frames.shape[2], colorspace=3,
                              encoded_image_string=encode_gif(frames))
        summary = Summary(value=[Summary.Value(tag="eval/video", image=image)])
        self.writer._get_file_writer().add_summary(summary, int(stats.get("env_steps", epoch)))
        self.writer.flush()

    def close(self) -> None:
        """Close the event file (once: a writer that failed, e.g. on a full disk, raises its error here
        once and is let go)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


#: The class of tensorboard's background thread that writes the event file.
WRITER_THREAD = "_AsyncWriterThread"


def quiet_writer_thread_errors() -> None:
    """Keep a write error of tensorboard's event-writer thread (a full disk) off the console.

    The thread stores the error, which the writer's next ``flush`` raises in the trainer's thread
    (where it becomes the run's one-line ``OutputError``), and then raises it again in its own
    thread, where Python would print ``Exception in thread ...`` and a traceback beside corral's
    line. Other threads' errors reach the hook that was there before. Installed once per process."""
    previous = threading.excepthook
    if getattr(previous, "corral_tensorboard", False):
        return

    def hook(args: Any) -> None:
        if isinstance(args.exc_value, OSError) and type(args.thread).__name__ == WRITER_THREAD:
            return
        previous(args)

    hook.corral_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def build_tensorboard_logger(config: TensorBoardLoggerConfig, *, log_dir: Path | None = None) -> TensorBoardLogger:
    """Build the TensorBoard logger."""
    return TensorBoardLogger(Path(log_dir or ".") / config.subdir)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=tensorboard``."""
    register("logger", "tensorboard", build_tensorboard_logger, config=TensorBoardLoggerConfig,
             help="TensorBoard scalars in <run dir>/tb")
