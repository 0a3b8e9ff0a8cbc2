"""``logger=csv``: ``progress.csv`` in the run directory, one row per epoch."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from corral import hookimpl
from corral.framework.checks import checked, inside_run_dir
from corral.framework.logger import Logger
from corral.results.writable import write_atomically


@dataclass
@checked("logger.csv")
class CSVLoggerConfig:
    """Settings of the CSV logger."""

    filename: str = field(default="progress.csv", metadata=inside_run_dir("file name inside the run directory"))


class CSVLogger(Logger):
    """Writes every epoch's statistics; when a new column appears the file is rewritten with it.

    Each row is flushed and fsynced before the trainer writes the epoch's snapshot, so a snapshot
    never holds an epoch whose row is missing. On :meth:`resume` the rows already in the file are
    kept up to the resumed epoch and the run appends after them: one file, one continuous curve.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self._file: Any = None
        self._writer: csv.DictWriter | None = None

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Append one row."""
        row = dict(stats)
        self.rows.append(row)
        new = [k for k in row if k not in self.columns]
        if new or self._writer is None:
            self.columns += new
            self._rewrite()
        else:
            self._writer.writerow(row)
            self._sync()

    def resume(self, epoch: int, env_steps: int) -> None:
        """Keep the file's rows of epochs before ``epoch``; later rows are dropped (the run logs them again)."""
        self.close()
        self.columns, self.rows = [], []
        if self.path.is_file():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or [])
                self.rows = [row for row in reader if _epoch_of(row) < epoch]
        if self.columns:
            self._rewrite()

    def _rewrite(self) -> None:
        if self._file is not None:
            self._file.close()

        def write(f: Any) -> None:
            writer = csv.DictWriter(f, fieldnames=self.columns, restval="")
            writer.writeheader()
            writer.writerows(self.rows)

        write_atomically(self.path, write, text=True)  # a reader (or a kill) sees the old file or the new one
        self._file = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, restval="")

    def _sync(self) -> None:
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        file, self._file, self._writer = self._file, None, None
        if file is not None:  # let go first: a close that fails (a full disk) raises once
            file.close()


def _epoch_of(row: Mapping[str, str]) -> float:
    try:
        return float(row.get("epoch") or "nan")
    except ValueError:
        return float("nan")


def build_csv_logger(config: CSVLoggerConfig, *, log_dir: Path | None = None) -> CSVLogger:
    """Build the CSV logger (in the current directory when there is no run directory)."""
    return CSVLogger(Path(log_dir or ".") / config.filename)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=csv``."""
    register("logger", "csv", build_csv_logger, config=CSVLoggerConfig, help="progress.csv in the run directory")
