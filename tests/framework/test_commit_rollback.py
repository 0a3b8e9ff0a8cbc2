"""An epoch whose commit fails is not part of the run, in every total of it: ``summary.json``'s
``train_time_s``, ``best_eval_return`` and ``final_eval_return`` are those of the committed epochs
(the rows of ``progress.csv``) and of the last snapshot, end to end through ``python train.py``.

The commit fails at the first epoch whose evaluation return is above every earlier one, so an
epoch that counted would show: a ``corral_epoch_end`` hook raises, or sets a statistic that is not a
number, or a logger's disk fills up (``tests/conf/faulty_run_parts.py``, installed as a plugin
distribution on a temporary path, as pip would install it).
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 240
#: ``tests/conf/faulty_run_parts.py`` (``tests`` is not an importable package).
parts = import_path(REPO / "tests" / "conf" / "faulty_run_parts.py", "faulty_run_parts")
output = parts.output


def train(tmp_path: Path, fault: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python train.py`` with the faulty parts installed and ``CORRAL_TEST_COMMIT_FAULT=fault``;
    evaluation every epoch, snapshots every epoch, run directory ``tmp_path/run``."""
    return parts.run_train(
        tmp_path, "trainer.n_epochs=12", "trainer.batch_size=256", "trainer.eval_every=1", "trainer.eval_episodes=2",
        "trainer.snapshot_every=1", "trainer.progress=false", "sampler=local", *overrides,
        f"hydra.run.dir={tmp_path / 'run'}", fault=fault, timeout=TIMEOUT)


@pytest.mark.parametrize(("fault", "loggers", "error"), [
    ("hook-raises", "[csv]", "raised RuntimeError: audit service unreachable at epoch {epoch}"),
    ("hook-string", "[csv]", "set the statistic corral_test/note to 'new best' (type str)"),
    ("logger-fails", "[failing,csv]", "logger=failing could not write the row of epoch {epoch} (OSError: No space "
                                      "left on device: failing.log)"),
])
def test_a_failed_commit_leaves_the_runs_totals_at_the_last_committed_epoch(
        tmp_path: Path, fault: str, loggers: str, error: str) -> None:
    """Before: ``train_time_s`` held the dropped epoch's seconds and ``best_eval_return`` its
    evaluation return (above every committed one), so summary.json disagreed with progress.csv (and
    with a later snapshot's totals); a failed logger also left ``final_eval_return`` at the dropped
    epoch's."""
    proc = train(tmp_path, fault, f"logger={loggers}")
    run = tmp_path / "run"
    assert proc.returncode == 2, output(proc)
    summary = json.loads((run / "summary.json").read_text())
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    dropped = summary["epochs"]  # the epoch whose commit failed, and the number of committed ones
    lines = [line for line in proc.stderr.splitlines() if line.startswith("corral: error:")]
    assert len(lines) == 1 and error.format(epoch=dropped) in lines[0], output(proc)
    assert summary["status"] == "failed", summary
    assert dropped >= 1 and [int(r["epoch"]) for r in rows] == list(range(dropped)), (summary, rows)

    committed = [float(r["eval/return_mean"]) for r in rows]
    assert summary["best_eval_return"] == max(committed), (summary["best_eval_return"], committed)
    assert summary["final_eval_return"] == committed[-1], (summary["final_eval_return"], committed)
    assert summary["train_time_s"] == pytest.approx(float(rows[-1]["time/total_s"]), rel=1e-9, abs=1e-9), (
        summary["train_time_s"], rows[-1]["time/total_s"])

    # The last snapshot (the last committed epoch's) holds the same totals.
    from corral.framework.snapshot import load_snapshot

    snapshots = sorted((run / "snapshots").glob("epoch_*.pt"))
    assert snapshots[-1].name == f"epoch_{dropped:06d}.pt", snapshots
    state = load_snapshot(snapshots[-1])
    assert state["best_eval_return"] == summary["best_eval_return"]
    assert state["elapsed"] == pytest.approx(summary["train_time_s"], rel=1e-9, abs=1e-9)
