"""``algo.anneal_lr``: PPO's (and RL2-PPO's) learning rate decays linearly over the run's budget, from
the trainer's progress (``Algorithm.training_progress``), as CleanRL's ``anneal_lr``: each epoch's update
uses ``learning_rate x (1 - done)``, ``done`` counted before that update, logged as ``ppo/learning_rate``."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SMALL = ["trainer.batch_size=256", "trainer.eval_every=0", "logger=[csv]", "trainer.progress=false"]


def train(run_dir: Path, *overrides: str) -> list[dict[str, str]]:
    """``python train.py`` into ``run_dir``; its progress rows."""
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), *SMALL, *overrides, f"hydra.run.dir={run_dir}"],
                          cwd=run_dir.parent, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(run_dir / "progress.csv") as f:
        return list(csv.DictReader(f))


def rates(rows: list[dict[str, str]]) -> list[float]:
    return [float(r["ppo/learning_rate"]) for r in rows]


def test_an_epoch_budget_decays_the_rate_by_epochs_and_a_resume_counts_against_its_new_limit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rows = train(run, "algo.anneal_lr=true", "algo.learning_rate=0.001", "trainer.n_epochs=4",
                 "trainer.max_env_steps=null")
    assert rates(rows) == pytest.approx([0.001, 0.00075, 0.0005, 0.00025])
    rows = train(run, f"trainer.resume={run}", "trainer.n_epochs=8")  # done = 4/8, ..., 7/8
    assert rates(rows)[4:] == pytest.approx([0.0005, 0.000375, 0.00025, 0.000125])


def test_a_step_budget_decays_the_rate_by_the_steps_done_before_each_update(tmp_path: Path) -> None:
    rows = train(tmp_path / "run", "algo.anneal_lr=true", "trainer.n_epochs=null", "trainer.max_env_steps=1000")
    before = [0] + [int(r["env_steps"]) for r in rows[:-1]]
    assert rates(rows) == pytest.approx([3e-4 * (1 - steps / 1000) for steps in before])
    assert len(rows) >= 3


def test_without_anneal_lr_the_rate_is_constant_and_not_logged(tmp_path: Path) -> None:
    rows = train(tmp_path / "run", "trainer.n_epochs=2", "trainer.max_env_steps=null")
    assert "ppo/learning_rate" not in rows[0]


def test_rl2_ppo_anneals_too(tmp_path: Path) -> None:
    rows = train(tmp_path / "run", "experiment=rl2_bandits", "algo.anneal_lr=true", "trainer.n_epochs=2",
                 "trainer.max_env_steps=null", "trainer.batch_size=200", "worker.n_envs=2", "algo.n_train_tasks=10",
                 "algo.n_test_tasks=2", "algo.minibatch_size=100")
    assert rates(rows) == pytest.approx([0.001, 0.0005]), rows  # the preset's algo.learning_rate=0.001


def test_the_normalisation_wrapper_passes_the_progress_on(tmp_path: Path) -> None:
    rows = train(tmp_path / "run", "algo.anneal_lr=true", "normalize.obs=true", "normalize.reward=true",
                 "trainer.n_epochs=2", "trainer.max_env_steps=null")
    assert rates(rows) == pytest.approx([3e-4, 1.5e-4])
