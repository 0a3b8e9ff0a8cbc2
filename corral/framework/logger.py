"""The Logger contract: where per-epoch statistics go; and the run's own log file (``corral.log``)."""

from __future__ import annotations

import logging
import os
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Mapping

#: Name of the run's text log inside its directory (Hydra's job log for ``hydra.job.name=corral``).
RUN_LOG = "corral.log"


class Logger(ABC):
    """Receives one dictionary of statistics per epoch.

    ``stats`` holds ``epoch`` and ``env_steps`` (environment steps so far), ``train/*`` episode
    statistics, the algorithm's entries (``loss/*`` and such), ``eval/*`` on evaluation epochs and
    ``time/*`` wall-clock figures. A row is logged only when its epoch is committed (with its
    snapshot, when one is due), so a logger never sees an epoch twice in one process.

    An ``OSError`` from :meth:`log` (a full disk, a permission) stops the run with one line naming
    the logger (``option_name``, set by ``train.py`` to the option that built it) and the file.
    """

    #: The ``logger=`` option that built this logger (``csv``), for messages; None outside ``train.py``.
    option_name: str | None = None

    @abstractmethod
    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Record the statistics of ``epoch``."""

    def resume(self, epoch: int, env_steps: int) -> None:
        """A resumed run continues here: keep what was recorded for epochs before ``epoch`` (up to
        ``env_steps`` environment steps) and drop anything later, which the run will log again.
        The default does nothing (right for loggers that only print)."""

    def log_video(self, epoch: int, path: Path, stats: Mapping[str, float]) -> None:
        """A video of ``epoch``'s first evaluation episode (``trainer.video_every``): an MP4 file at
        ``path`` in ``<run dir>/videos``. Called right after :meth:`log` on epochs that recorded
        one (the path is also ``trainer.last_video`` in ``corral_epoch_end``). Default: nothing."""

    def flush(self) -> None:
        """Write now anything held back (a line the console logger skips under ``every``): the
        trainer calls it when the run is interrupted, before the line that says so. Default: nothing."""

    def close(self) -> None:
        """Flush and release files."""


class RunLogFileHandler(logging.FileHandler):
    """The file handler of a run's ``corral.log``. A record it cannot write (a full disk, a quota) is
    one ``corral: warning: cannot write .../corral.log (...)`` line on stderr, once, instead of
    logging's ``--- Logging error ---`` block with a traceback for every record; later records are
    still tried (a disk that has room again gets them)."""

    _reported = False

    def handleError(self, record: logging.LogRecord) -> None:
        """Say once that the file cannot be written; other errors go to logging's own handling."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        if not self._reported:
            self._reported = True
            why = exc.strerror or str(exc) or type(exc).__name__
            sys.stderr.write(f"{job_prefix()}corral: warning: cannot write {self.baseFilename} ({type(exc).__name__}: "
                             f"{why}); the run's log records are missing from it while that lasts\n")
            sys.stderr.flush()

    def close(self) -> None:
        """Close the file. Each record is flushed as it is written, so a failure here is one that
        :meth:`handleError` has already reported."""
        try:
            super().close()
        except OSError:
            pass


def run_log(log_dir: str | os.PathLike | None) -> logging.Logger:
    """A logger whose records go to ``<log_dir>/corral.log`` only (not to the console).

    The console logger writes its epoch lines here, the trainer its interrupt line and ``train.py``
    its closing line; Hydra's own records go to the same file. Without a ``log_dir`` the records
    are dropped.
    """
    log = logging.getLogger("corral.run")
    log.propagate = False
    log.setLevel(logging.INFO)
    path = str(Path(log_dir) / RUN_LOG) if log_dir is not None else None
    for handler in list(log.handlers):
        if getattr(handler, "baseFilename", None) != (os.path.abspath(path) if path else None):
            log.removeHandler(handler)
            handler.close()
    if path is not None and not log.handlers:
        Path(log_dir).mkdir(parents=True, exist_ok=True)  # type: ignore[arg-type]
        handler = RunLogFileHandler(path, mode="a", delay=True)
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        log.addHandler(handler)
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return log


class ConsoleLineFormatter(logging.Formatter):
    """The console format of a job's log records (``hydra/job_logging=corral``).

    A record of a ``corral.*`` logger is one line in the style of corral's other lines: ``corral:
    warning: <message>`` (``corral: <message>`` below warning level), after :func:`job_prefix` in a
    sweep; a message that already starts with ``corral: `` is not prefixed twice. Other libraries'
    records keep the format this formatter was given (Hydra's, with time and logger name)."""

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one console line (and its traceback, when it carries one)."""
        if record.name != "corral" and not record.name.startswith("corral."):
            return super().format(record)
        message = record.getMessage().removeprefix("corral: ")
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        line = f"{job_prefix()}corral: {level}{message}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def log_corral_records_as_lines(run_log: str | None = None, label: str = "") -> None:
    """Call in a process a run starts (a sampler's worker process, a Ray actor): print corral's log
    records as the job's console does (``corral: warning: ...`` on stderr, :class:`ConsoleLineFormatter`),
    and append them to ``run_log`` (the run's ``corral.log``, :func:`current_run_log` in the process
    that started this one) when its directory is here, marked ``[label]`` (``worker 1``). Nothing
    is configured to print them in a spawned process or a Ray worker, and Python's last resort
    would print a warning's bare message. A forked process keeps the job's handlers (its records
    reach both already) and gets nothing more."""
    if logging.getLogger().handlers or logging.getLogger("corral").handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleLineFormatter())
    logging.getLogger("corral").addHandler(handler)
    if run_log and Path(run_log).parent.is_dir():  # a Ray node without the run's file system has none
        to_file = RunLogFileHandler(run_log, mode="a", delay=True)  # appends: whole lines from each process
        mark = f"[{label}] " if label else ""
        to_file.setFormatter(logging.Formatter(f"[%(asctime)s][%(name)s][%(levelname)s] - {mark}%(message)s"))
        logging.getLogger("corral").addHandler(to_file)


def current_run_log() -> str | None:
    """The run's ``corral.log`` that this process's log records go to (the file handler Hydra's job
    logging gives the root logger), or None outside such a run: what a sampler passes to the
    processes it starts, so their records reach the same file."""
    for handler in logging.getLogger().handlers:
        name = getattr(handler, "baseFilename", None)
        if isinstance(handler, logging.FileHandler) and name and Path(name).name == RUN_LOG:
            return str(name)
    return None


def job_prefix() -> str:
    """``[job 3] `` inside job 3 of a Hydra multirun (so parallel jobs' lines can be told apart), else ``""``."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return ""
    num = hc.job.get("num")  # type: ignore[attr-defined]  # a DictConfig at run time, typed as JobConf
    multirun = str(hc.mode).rsplit(".", 1)[-1] == "MULTIRUN"
    return f"[job {num}] " if multirun and num is not None else ""


__all__ = ["ConsoleLineFormatter", "Logger", "RUN_LOG", "RunLogFileHandler", "current_run_log", "job_prefix",
           "log_corral_records_as_lines", "run_log"]
