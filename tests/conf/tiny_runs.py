"""Tiny runs trained with ``train.py`` as a user trains them, for the tests that evaluate, load or resume one.

Imported with :func:`corral.testing.modules.import_path` (``tests`` is not an importable package);
``tests/conftest.py``'s ``tiny_meta_runs`` fixture trains :func:`meta_runs` once per session.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Most seconds one tiny training run may take (a busy 2-core machine).
TIMEOUT = 300
#: An RL2-PPO run on 5-armed bandits: one epoch of 200 steps, 10 meta-train and 2 held-out tasks.
RL2 = ("experiment=rl2_bandits", "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.batch_size=200",
       "worker.n_envs=2", "algo.n_train_tasks=10", "algo.n_test_tasks=2", "algo.minibatch_size=100")
#: A PEARL run on the point robot: one epoch of 60 steps, 4 meta-train and 2 held-out tasks.
PEARL = ("experiment=pearl_pointnav", "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.batch_size=60",
         "algo.min_buffer_size=60", "worker.n_envs=1", "algo.n_train_tasks=4", "algo.n_test_tasks=2",
         "algo.meta_batch=2")


def train(run_dir: Path, *overrides: str) -> Path:
    """``python train.py <overrides>`` into ``run_dir`` without evaluation, progress bar or loggers but CSV
    (bounded; fails the test with the run's stderr when it does not complete). Returns ``run_dir``."""
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), *overrides, "trainer.progress=false",
                           "trainer.eval_every=0", "logger=[csv]", f"hydra.run.dir={run_dir}"], cwd=run_dir.parent,
                          capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


#: A PPO CartPole run of 256-step epochs that evaluates 2 episodes every epoch unless the test says otherwise.
EVALUATING = ("trainer.batch_size=256", "trainer.max_env_steps=null", "logger=[csv]", "trainer.progress=false")


def train_evaluating(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python train.py`` of :data:`EVALUATING` with ``trainer.eval_every=1 trainer.eval_episodes=2``
    (unless ``overrides`` set ``trainer.eval_every``) and ``overrides``, into ``run_dir`` (bounded; fails the
    test with the run's stderr when it does not complete). Returns the finished process."""
    evaluate = [] if any(o.startswith("trainer.eval_every=") for o in overrides) else [
        "trainer.eval_every=1", "trainer.eval_episodes=2"]
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), *EVALUATING, *evaluate, *overrides,
                           f"hydra.run.dir={run_dir}"], cwd=run_dir.parent, capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def eval_returns(run_dir: Path) -> list[float]:
    """``eval/return_mean`` of each row of the run's ``progress.csv`` that has one, in order."""
    with open(run_dir / "progress.csv") as f:
        return [float(row["eval/return_mean"]) for row in csv.DictReader(f) if row.get("eval/return_mean")]


def meta_runs(where: Path) -> Path:
    """:data:`RL2` into ``where/rl2`` and :data:`PEARL` into ``where/pearl``; returns ``where``."""
    train(where / "rl2", *RL2)
    train(where / "pearl", *PEARL)
    return where


__all__ = ["PEARL", "REPO", "RL2", "TIMEOUT", "meta_runs", "train"]
