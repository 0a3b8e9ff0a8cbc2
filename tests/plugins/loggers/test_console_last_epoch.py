"""``logger.console.every=N``: the run's last epoch always has its line, once, whether the run
completes or is interrupted (as Lightning and SB3 print their last row)."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import default_signal_dispositions

TRAIN = Path(__file__).resolve().parents[3] / "train.py"
TINY = ["trainer.batch_size=200", "trainer.eval_every=0", "trainer.progress=false", "logger=[console,csv]"]


def printed_epochs(stdout: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^epoch +(\d+) \|", stdout, re.MULTILINE)]


def committed_epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [int(float(r["epoch"])) for r in csv.DictReader(f)]


@pytest.mark.parametrize(("every", "printed"), [(5, [0, 2]), (2, [0, 2])])
def test_the_last_epoch_is_printed_once(tmp_path: Path, every: int, printed: list[int]) -> None:
    proc = subprocess.run([sys.executable, str(TRAIN), f"logger.console.every={every}", "trainer.n_epochs=3", *TINY,
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert printed_epochs(proc.stdout) == printed, proc.stdout


def test_an_interrupted_run_prints_its_last_committed_epoch_before_the_interrupted_line(tmp_path: Path) -> None:
    """stdout and stderr in one pipe, in the order a terminal shows them: the last epoch's line (held back
    by ``every``) comes before the trainer's ``corral: interrupted ...`` line, not after it."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(TRAIN), "logger.console.every=1000", "trainer.n_epochs=1000", *TINY,
                             f"hydra.run.dir={run_dir}"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=default_signal_dispositions)  # the suite may run detached: SIGINT ignored
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            csv_file = run_dir / "progress.csv"
            if csv_file.exists() and len(csv_file.read_text().splitlines()) >= 3:  # epochs 0 and 1 committed
                break
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out[-2000:]
    last = committed_epochs(run_dir)[-1]
    assert last >= 1 and printed_epochs(out) == [0, last], out
    lines = out.splitlines()
    interrupted = [i for i, line in enumerate(lines) if line.startswith("corral: interrupted")]
    last_line = [i for i, line in enumerate(lines) if re.match(rf"epoch +{last} \|", line)]
    # the trainer's line ("... while training epoch N ...; resume with ..."), then the run's summary line
    assert len(interrupted) == 2 and len(last_line) == 1 and last_line[0] < interrupted[0], out
