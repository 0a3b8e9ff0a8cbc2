"""A run's directory is its own: one process trains in it at a time, a branch kept inside the original
copies the original's history and not itself, and a resumed run's summary says what the run now is."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from corral.framework.entry import resumed_overrides

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]", "trainer.progress=false"]


def train(cwd: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_a_run_that_is_training_cannot_be_resumed_in_place_by_a_second_process(tmp_path: Path) -> None:
    """Before, the second process trained in the same directory: the first died on a snapshot file the
    second had moved ('could not write the snapshot ...'), and summary.json mixed the two runs."""
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *SMALL, "trainer.n_epochs=100000",
                              f"hydra.run.dir={run}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (run / "snapshots" / "latest").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not write a snapshot"
            time.sleep(0.2)
        second = train(tmp_path, f"trainer.resume={run}", "trainer.n_epochs=100001")
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip().splitlines()[-1] == (
            f"corral: error: trainer.resume={run}: {run} is in use: a corral run is training there (pid {first.pid}, "
            f"which holds {run / '.corral.lock'}); wait for it to finish or stop it (kill -INT {first.pid}), then "
            f"resume it with trainer.resume={run}, or branch it into a new directory now: trainer.resume={run} "
            "hydra.run.dir=<new directory>")
        assert not list((run / ".hydra").glob("resume-*"))  # nothing written into the run
    finally:
        first.terminate()
        first.communicate(timeout=120)
    assert first.returncode == 143
    # Stopped, it can be resumed (its lock went with its process).
    epochs = json.loads((run / "summary.json").read_text())["epochs"]
    again = train(tmp_path, f"trainer.resume={run}", f"trainer.n_epochs={epochs + 1}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["epochs"] == epochs + 1


def test_a_branch_inside_the_original_copies_its_history_and_not_itself(tmp_path: Path) -> None:
    """``hydra.run.dir=<run>/longer``: before, the copy of the original's entries took the branch's own
    directory too (``longer/longer/corral.log``), and an earlier branch inside it was copied again."""
    run = tmp_path / "run"
    assert train(tmp_path, *SMALL, "trainer.n_epochs=2", f"hydra.run.dir={run}").returncode == 0
    for name, epochs in (("longer", 3), ("longer2", 4)):
        proc = train(tmp_path, f"trainer.resume={run}", f"trainer.n_epochs={epochs}", f"hydra.run.dir={run / name}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (run / "longer" / "longer").exists()
    assert sorted(p.name for p in (run / "longer2").iterdir()) == [
        ".corral.lock", ".hydra", "corral.log", "progress.csv", "snapshots", "summary.json"]


def test_a_sweep_of_branches_records_what_each_branch_is(tmp_path: Path) -> None:
    """``-m trainer.resume=<run> trainer.n_epochs=3,4``: before, both branches' summary.json kept the
    original's overrides (trainer.n_epochs=2) and job, and `corral results` averaged a 3-epoch and a
    4-epoch run as two seeds of one row."""
    run = tmp_path / "run"
    assert train(tmp_path, *SMALL, "trainer.n_epochs=2", f"hydra.run.dir={run}").returncode == 0
    sweep = tmp_path / "sweep"
    proc = train(tmp_path, "-m", f"trainer.resume={run}", "trainer.n_epochs=3,4", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in (0, 1):  # each job's lines carry its prefix, this one too
        assert f"[job {job}] corral: resumed from {run / 'snapshots'}" in proc.stderr, proc.stderr[-3000:]
    for job, epochs in ((0, 3), (1, 4)):
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        assert summary["epochs"] == epochs and summary["job"]["num"] == job
        assert f"trainer.n_epochs={epochs}" in summary["overrides"] and "trainer.n_epochs=2" not in summary["overrides"]
    results = subprocess.run([sys.executable, "-m", "corral.framework.cli", "results", str(sweep), "--json"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert results.returncode == 0, results.stderr
    rows = json.loads(results.stdout)["rows"]
    assert len(rows) == 2, rows


def test_resumed_overrides_keep_what_the_run_is_and_leave_out_how_a_session_ran() -> None:
    first = ["algo=ppo", "trainer.n_epochs=2", "seed=3"]
    now = ["trainer.resume=/r", "trainer.n_epochs=4", "sampler=multiprocessing", "logger=[csv]",
           "trainer.batch_size=400", "hydra.run.dir=/b"]
    assert resumed_overrides(first, now) == ["algo=ppo", "trainer.n_epochs=4", "seed=3", "trainer.batch_size=400"]
