"""``logger=csv``: ``progress.csv`` in the run directory, one row per epoch."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from corral import hookimpl
from corral.framework.logger import Logger


@dataclass
class CSVLoggerConfig:
    """Settings of the CSV logger."""

    filename: str = field(default="progress.csv", metadata={"help": "file name inside the run directory"})


class CSVLogger(Logger):
    """Writes every epoch's statistics; when a new column appears the file is rewritten with it."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self._file = None
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
            assert self._file is not None
            self._file.flush()

    def _rewrite(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = open(self.path, "w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, restval="")
        self._writer.writeheader()
        self._writer.writerows(self.rows)
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None


def build_csv_logger(config: CSVLoggerConfig, *, log_dir: Path | None = None) -> CSVLogger:
    """Build the CSV logger (in the current directory when there is no run directory)."""
    return CSVLogger(Path(log_dir or ".") / config.filename)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=csv``."""
    register("logger", "csv", build_csv_logger, config=CSVLoggerConfig, help="progress.csv in the run directory")
