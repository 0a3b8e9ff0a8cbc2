"""Helpers shared by the SAC and DQN tests: run train.py in a subprocess and read its progress."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def train(run_dir: Path, *overrides: str, timeout: float = 420) -> subprocess.CompletedProcess:
    """``python train.py hydra.run.dir=<run_dir> <overrides>`` as a user runs it."""
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "trainer.progress=false", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def warning_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The ``corral: warning:`` lines a run printed."""
    return [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]


def rows(run_dir: Path) -> list[dict[str, str]]:
    """progress.csv rows without the wall-clock columns."""
    with open(run_dir / "progress.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def evals(run_dir: Path) -> list[float]:
    """The evaluation returns of a run, in order."""
    return [float(r["eval/return_mean"]) for r in rows(run_dir) if r.get("eval/return_mean")]


def assert_resume_is_exact(tmp_path: Path, overrides: list[str], n_epochs: int, stop_at: int) -> None:
    """A run stopped after ``stop_at`` epochs and resumed matches the uninterrupted run row for row."""
    full = tmp_path / "full"
    proc = train(full, *overrides, f"trainer.n_epochs={n_epochs}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = tmp_path / "part"
    proc = train(part, *overrides, f"trainer.n_epochs={stop_at}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = tmp_path / "resumed"
    proc = train(resumed, *overrides, f"trainer.n_epochs={n_epochs}", f"trainer.resume={part}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr
    expected, got = rows(full), rows(resumed)
    # a resume into another directory continues part's curve there: part's rows, then the resumed epochs
    assert [float(r["epoch"]) for r in got] == [float(e) for e in range(n_epochs)]
    assert got == expected, "the resumed epochs differ from the uninterrupted run"
