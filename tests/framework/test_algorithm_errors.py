"""An algorithm's update that raises an exception of its own (not NaNs: those are a divergence) ends
the run in one line naming the algorithm and the epoch, under the traceback from the update. Before,
``algo.learning_rate=1e38`` (Adam's step overflows float32) ended in Hydra's "Error executing job"
report with exit code 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from corral.framework.errors import AlgorithmError, error_report

ROOT = Path(__file__).resolve().parents[2]


def test_an_update_that_overflows_is_one_line_naming_the_algorithm(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "algo.learning_rate=1e38", "trainer.n_epochs=1",
                           "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Error executing job" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.rstrip().splitlines()
    assert lines[-1] == (
        "corral: error: algo=ppo's update in epoch 0 raised RuntimeError: value cannot be converted to type float "
        "without overflow; the run stopped before sampling with it (epoch 0 is not part of the run): a value in the "
        "update is beyond the range of the tensors' float type: a learning rate (or another algo.* setting) too "
        "large; lower it; the traceback above shows where it raised"), lines[-1]
    assert lines[-2] == "RuntimeError: value cannot be converted to type float without overflow"
    assert any("adam.py" in line for line in lines[:-1])  # where it raised, above the line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("AlgorithmError: algo=ppo's update in epoch 0")


def test_the_report_puts_the_algorithms_traceback_above_its_line() -> None:
    exc = AlgorithmError("algo=x's update in epoch 3 raised ValueError: no", algorithm_traceback="Traceback:\n  here\n")
    assert error_report(exc, lead="[job 1] ").splitlines() == [
        "[job 1] Traceback:", "[job 1]   here", "[job 1] corral: error: algo=x's update in epoch 3 raised ValueError: no"]
