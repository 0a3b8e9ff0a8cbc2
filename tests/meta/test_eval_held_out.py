"""``corral eval`` of a meta-RL run runs the run's held-out tasks as its meta-evaluation does (the same
tasks, seeds and protocol, through the same plan), and says which ones ran; a run trained before
``env.task_seed`` existed is one line, not numbers for a task it did not train on."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it (bounded)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def train(run_dir: Path, *overrides: str) -> Path:
    proc = run([sys.executable, str(REPO / "train.py"), *overrides, "trainer.progress=false", "logger=[csv]",
                f"hydra.run.dir={run_dir}"], run_dir.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def corral_eval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "corral.framework.cli", "eval", *args, "-o", ""], cwd)


def final_meta_eval(run_dir: Path) -> dict[str, float]:
    with open(run_dir / "progress.csv") as f:
        last = list(csv.DictReader(f))[-1]
    return {k: float(v) for k, v in last.items() if k.startswith("meta_eval/") and v != ""}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An RL2 bandits run and a PEARL point-robot run, each meta-evaluated at its last epoch."""
    where = tmp_path_factory.mktemp("eval_held_out")
    train(where / "rl2", "experiment=rl2_bandits", "trainer.n_epochs=2", "trainer.max_env_steps=null",
          "trainer.batch_size=200", "worker.n_envs=2", "algo.n_train_tasks=10", "algo.n_test_tasks=3",
          "algo.minibatch_size=100", "algo.meta_eval_trials=2", "trainer.eval_every=1")
    train(where / "pearl", "experiment=pearl_pointnav", "trainer.n_epochs=1", "trainer.max_env_steps=null",
          "trainer.batch_size=60", "algo.min_buffer_size=60", "worker.n_envs=1", "algo.n_train_tasks=4",
          "algo.n_test_tasks=2", "algo.meta_batch=2", "trainer.eval_every=1", "trainer.eval_episodes=1")
    return where


def test_rl2_eval_repeats_the_runs_final_meta_eval_on_its_held_out_tasks(runs: Path) -> None:
    """RL2's meta-eval samples actions (algo.meta_eval_deterministic=false): with --stochastic the
    defaults repeat it, every ``meta_eval/*`` number of the run's last row."""
    proc = corral_eval(str(runs / "rl2"), "--stochastic", "--json", cwd=runs)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    logged = final_meta_eval(runs / "rl2")
    assert logged and result["meta_eval"] == pytest.approx(logged), (result["meta_eval"], logged)
    assert result["trials"] == 6 and result["episodes_per_trial"] == 10
    assert result["return_mean"] == pytest.approx(logged["meta_eval/trial_return"])
    assert result["tasks"] == ("the run's 3 held-out meta-test tasks (ids 10-12, algo.task_seed=0), in the order of "
                               "the run's meta-eval (each task 2 trials in a row, 6 in all): all of them")


def test_rl2_eval_says_its_trials_and_the_mode_the_meta_eval_used(runs: Path) -> None:
    proc = corral_eval(str(runs / "rl2"), "--episodes", "4", "--n-workers", "2", cwd=runs)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "4 deterministic trials of 10 episodes on the run env, seed 1" in lines[0], lines
    assert lines[1].startswith("trial return "), lines
    assert lines[3] == ("tasks: the run's 3 held-out meta-test tasks (ids 10-12, algo.task_seed=0), in the order of "
                        "the run's meta-eval (each task 2 trials in a row, 6 in all): 4 of them, cycling; the run's "
                        "meta-eval acts with sampled actions (algo.meta_eval_deterministic=false): run with "
                        "--stochastic to repeat it"), lines
    uneven = corral_eval(str(runs / "rl2"), "--episodes", "3", "--n-workers", "2", cwd=runs)
    assert uneven.returncode == 2 and uneven.stderr.strip() == (
        "corral eval: error: --n-workers 2 with 3 trials: corral eval of a meta-RL run (algo=rl2_ppo) gives each "
        "worker the same number of trials, so give --episodes a multiple of 2 (the trials; the run's meta-eval "
        "runs 6)"), uneven.stderr


def test_pearl_eval_repeats_the_runs_final_meta_eval(runs: Path) -> None:
    proc = corral_eval(str(runs / "pearl"), "--json", cwd=runs)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    logged = final_meta_eval(runs / "pearl")
    assert logged and result["meta_eval"] == pytest.approx(logged), (result["meta_eval"], logged)
    assert result["trials"] == 2 and result["episodes_per_trial"] == 3 and len(result["returns"]) == 2
    assert result["tasks"].startswith("the run's 2 held-out meta-test tasks (ids 4-5, algo.task_seed=0)"), result


def without_task_seed(yaml_text: str) -> str:
    lines = yaml_text.splitlines(keepends=True)
    kept = [line for line in lines if line.strip().partition(":")[0] != "task_seed" or not line.startswith("  ")]
    assert len(kept) == len(lines) - 1, yaml_text
    return "".join(kept)


def test_an_old_run_without_env_task_seed_is_one_line(tmp_path: Path) -> None:
    """A PPO point_nav run whose saved config (``.hydra/config.yaml`` and the snapshot's) has no
    ``env.task_seed``, as one trained before it existed: its environments each drew their own task."""
    old = train(tmp_path / "old", "env=point_nav", "trainer.n_epochs=1", "trainer.batch_size=200",
                "trainer.eval_every=0")
    hydra_cfg = old / ".hydra" / "config.yaml"
    hydra_cfg.write_text(without_task_seed(hydra_cfg.read_text()))
    for snapshot in (old / "snapshots").glob("*.pt"):
        data = torch.load(snapshot, weights_only=False)
        data["config"] = without_task_seed(data["config"])
        torch.save(data, snapshot)
    proc = corral_eval(str(old), "--episodes", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.strip() == (
        "corral eval: error: the run's config has no env.task_seed (env=point_nav): it was trained before a run had "
        "one task, when each of its environments drew a task of its own, which corral eval cannot rebuild; give "
        "env.task_seed=N to evaluate on the task that seed draws (not one the run trained on), or train the run "
        "again"), proc.stderr
    chosen = corral_eval(str(old), "env.task_seed=4", "--episodes", "1", cwd=tmp_path)
    assert chosen.returncode == 0, chosen.stderr
    assert "tasks: the run's one task (env.task_seed=4)" in chosen.stdout, chosen.stdout
