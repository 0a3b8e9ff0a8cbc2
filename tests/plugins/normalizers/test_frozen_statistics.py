"""``normalize.update=false``, end to end through ``python train.py`` in subprocesses, as a user runs it.

It freezes the normalisation statistics of a resumed run (``trainer.resume=<run> normalize.update=false``):
the resumed run trains its policy on with the snapshot's statistics, bit for bit. A new run has no
statistics to freeze (they would stay at mean 0 and variance 1: nothing normalised), and is refused in
one line before anything starts.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.framework.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "train.py"
TIMEOUT = 240
#: A tiny CartPole run: epochs of 200 steps, CSV only.
SMALL = ["trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` in ``cwd``; never hangs."""
    return subprocess.run([sys.executable, str(TRAIN), *overrides], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def snapshot(run_dir: Path, epoch: int) -> dict[str, Any]:
    """The algorithm's part of the run's snapshot after ``epoch`` epochs (data only)."""
    return load_snapshot(run_dir / "snapshots" / f"epoch_{epoch:06d}.pt", objects=False)["algo"]


def statistics_bytes(algo: dict[str, Any]) -> dict[str, bytes]:
    """Every number of the normalisation statistics, as exact bytes."""
    norm = algo["normalization"]
    return {f"{part}.{key}": np.asarray(norm[part][key], np.float64).tobytes()
            for part in ("obs", "ret") for key in ("mean", "var", "count")}


def policy_bytes(algo: dict[str, Any]) -> bytes:
    return b"".join(np.asarray(v).tobytes() for _, v in sorted(algo["policy"].items()))


def obs_std_column(run_dir: Path) -> list[str]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [row["normalize/obs_std_mean"] for row in csv.DictReader(f)]


@pytest.mark.parametrize("normalising", [["normalize.obs=true"], ["normalize.reward=true"],
                                         ["normalize.obs=true", "normalize.reward=true"]])
def test_a_new_run_with_frozen_statistics_is_one_line_before_anything_starts(tmp_path: Path,
                                                                              normalising: list[str]) -> None:
    """It trained as a run without normalisation, in silence: its statistics stayed at mean 0, variance 1."""
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *SMALL, "trainer.n_epochs=1", *normalising, "normalize.update=false",
                 f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, output(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, output(proc)
    line = lines[0]
    assert line.startswith("corral: error: normalize.update=false "), line
    assert "new run" in line and "no statistics to freeze" in line and "nothing would be normalised" in line, line
    assert "leave normalize.update=true" in line and "trainer.resume=<run>" in line, line
    assert " ".join(normalising) in line, line
    assert not run_dir.exists(), "the refused run made its directory"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_resume_freezes_the_statistics_bit_for_bit_while_the_policy_trains(tmp_path: Path) -> None:
    """``trainer.resume=<run> normalize.update=false`` was refused (``these overrides would change it``):
    the option could never freeze anything. Now the resumed epochs keep the snapshot's statistics exactly
    (evaluation included), a later resume keeps the run's setting, and ``normalize.update=true`` thaws them."""
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *SMALL, "trainer.n_epochs=2", "normalize.obs=true", "normalize.reward=true",
                 "trainer.keep_snapshots=0", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    frozen = snapshot(run_dir, 2)
    assert statistics_bytes(frozen) != statistics_bytes(snapshot(run_dir, 1))  # they were updating

    resume = [*SMALL, f"trainer.resume={run_dir}", "trainer.keep_snapshots=0"]
    proc = train(tmp_path, *resume, "trainer.n_epochs=4", "normalize.update=false", "trainer.eval_every=1",
                 "trainer.eval_episodes=2")
    assert proc.returncode == 0, output(proc)
    assert "corral: resumed from" in proc.stderr, output(proc)
    for epoch in (3, 4):
        later = snapshot(run_dir, epoch)
        assert statistics_bytes(later) == statistics_bytes(frozen), f"epoch {epoch}: the statistics changed"
        assert policy_bytes(later) != policy_bytes(snapshot(run_dir, epoch - 1)), f"epoch {epoch}: no training"
    std = obs_std_column(run_dir)
    assert len(std) == 4 and std[1] != std[0] and std[1] == std[2] == std[3], std  # frozen from epoch 2 on

    proc = train(tmp_path, *resume, "trainer.n_epochs=5")  # the run's setting: still frozen
    assert proc.returncode == 0, output(proc)
    assert statistics_bytes(snapshot(run_dir, 5)) == statistics_bytes(frozen)

    proc = train(tmp_path, *resume, "trainer.n_epochs=6", "normalize.update=true")  # thawed
    assert proc.returncode == 0, output(proc)
    thawed = snapshot(run_dir, 6)
    assert statistics_bytes(thawed)["obs.count"] != statistics_bytes(frozen)["obs.count"]
    assert statistics_bytes(thawed)["obs.mean"] != statistics_bytes(frozen)["obs.mean"]


def test_a_resume_still_refuses_every_other_normalize_change(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *SMALL, "trainer.n_epochs=1", "normalize.obs=true", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    proc = train(tmp_path, *SMALL, f"trainer.resume={run_dir}", "trainer.n_epochs=2", "normalize.update=false",
                 "normalize.clip=5")
    assert proc.returncode == 2, output(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, output(proc)
    assert "would change it: normalize.clip=5 (the run has normalize.clip=10.0)." in lines[0], lines[0]
    assert "normalize.update=false (" not in lines[0], lines[0]  # the one normalize.* key a resume may change
    assert "the sampler (with the same sampler.n_workers) and normalize.update" in lines[0], lines[0]
    assert not (run_dir / "snapshots" / "epoch_000002.pt").exists()


def test_corral_eval_evaluates_a_run_with_frozen_statistics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *SMALL, "trainer.n_epochs=1", "normalize.obs=true", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    proc = train(tmp_path, *SMALL, f"trainer.resume={run_dir}", "trainer.n_epochs=2", "normalize.update=false")
    assert proc.returncode == 0, output(proc)
    corral = Path(sys.executable).parent / "corral"
    command = [str(corral)] if corral.exists() else [sys.executable, "-m", "corral.framework.cli"]
    proc = subprocess.run([*command, "eval", str(run_dir), "--episodes", "2", "--output", ""], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, output(proc)
    assert "return " in proc.stdout, output(proc)
