"""``logger=jsonl``: one JSON object per epoch, one per line, in ``<run dir>/progress.jsonl``.

JSON lines are easy to tail, to append to on resume, and to load (``pandas.read_json(path,
lines=True)``). Non-finite numbers (NaN, inf) are written as ``null`` so every line is strict JSON.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Mapping

from corral import Logger


@dataclass
class JSONLinesLoggerConfig:
    """Settings of ``logger=jsonl``."""

    filename: str = field(default="progress.jsonl", metadata={"help": "file name inside the run directory"})


def _plain(value: Any) -> Any:
    """A JSON-safe version of a statistic (numpy scalars become Python numbers, NaN becomes null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JSONLinesLogger(Logger):
    """Appends ``{"epoch": n, <statistic>: value, ...}`` lines to ``path`` (flushed every epoch)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # append: a resumed run continues

    def resume(self, epoch: int, env_steps: int) -> None:
        """A resumed run continues in its own run directory from ``epoch``: keep the lines of the
        epochs before it and drop later ones (written after the snapshot; the run logs them again)."""
        self.close()
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line).get("epoch", -1) < epoch]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Write one line for ``epoch``."""
        if self._file is None:
            raise RuntimeError(f"the JSON-lines logger for {self.path} was closed")
        record: dict[str, Any] = {"epoch": int(epoch)}
        record.update((str(k), _plain(v)) for k, v in stats.items() if k != "epoch")
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def build_jsonl_logger(config: JSONLinesLoggerConfig, *, log_dir: Path | None = None) -> JSONLinesLogger:
    """Build the logger in the run directory (the current directory when there is none)."""
    return JSONLinesLogger(Path(log_dir or ".") / config.filename)


__all__ = ["JSONLinesLogger", "JSONLinesLoggerConfig", "build_jsonl_logger"]
