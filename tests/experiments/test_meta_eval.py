"""experiments/meta_eval.py: the bandit baselines it compares RL2 with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("meta_eval_script", ROOT / "experiments" / "meta_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["meta_eval_script"] = module
    spec.loader.exec_module(module)
    return module


def test_ucb1_explores_every_arm_then_exploits_the_best() -> None:
    m = load()
    probs = np.array([0.0, 0.0, 1.0, 0.0])
    rewards = m.bandit_baseline("ucb1", probs, 12, np.random.default_rng(0))
    # one pull of each arm, then mean + sqrt(2 ln t / n): the paying arm until t = 8, when
    # 1 + sqrt(2 ln 8 / 5) = 1.91 < sqrt(2 ln 8) = 2.04 sends it back to exploring
    assert rewards.tolist() == [0, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1]
    greedy = m.bandit_baseline("ucb1", probs, 12, np.random.default_rng(0), c=0.0)
    assert greedy[4:].tolist() == [1.0] * 8


def test_random_policy_earns_the_mean_probability() -> None:
    m = load()
    probs = np.array([0.1, 0.5, 0.9])
    rng = np.random.default_rng(1)
    mean = np.mean([m.bandit_baseline("random", probs, 10, rng).mean() for _ in range(400)])
    assert abs(mean - 0.5) < 0.03


def test_pearl_runs_get_per_episode_returns_sparse_returns_and_success(tmp_path: Path) -> None:
    """A (barely trained) PEARL run, evaluated as the script does: trials of the run's
    meta_eval_episodes episodes on every held-out task, with the sparse return and success."""
    import subprocess

    run_dir = tmp_path / "pearl"
    cmd = [sys.executable, str(ROOT / "train.py"), "experiment=pearl_pointnav", "worker.n_envs=2",
           "policy.hidden_sizes=[16]", "policy.encoder_hidden_sizes=[16]", "algo.qf_hidden_sizes=[16]",
           "algo.meta_batch=2", "algo.batch_size=8", "algo.context_size=4", "algo.min_buffer_size=60",
           "algo.gradient_steps=2", "algo.n_train_tasks=6", "algo.n_test_tasks=3", "trainer.batch_size=120",
           "trainer.n_epochs=2", "trainer.max_env_steps=null", "trainer.eval_every=1", "trainer.eval_episodes=1",
           "trainer.snapshot_every=1", "trainer.progress=false", "logger=[csv]", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = load()
    r = m.evaluate_run(run_dir, trials_per_task=2, seed=7)
    assert r["returns"].shape == (6, 3) and r["context_returns"].shape == (6, 3) and r["successes"].dtype == bool
    assert (r["returns"] < 0).all() and (r["context_returns"] >= 0).all()
    assert r["task_ids"].tolist() == [6, 6, 7, 7, 8, 8]  # held-out tasks, in order
    # where each episode ends: 20 steps of at most 0.1 per axis from the origin; goals 1 from it
    start, goal = r["end_start_distance"], r["end_goal_distance"]
    assert start.shape == goal.shape == (6, 3) and (start <= 20 * 0.1 * np.sqrt(2) + 1e-6).all()
    assert (np.abs(start - 1.0) <= goal + 1e-6).all()  # triangle inequality with |goal - start| = 1
    r["label"] = "seed 1"
    lines = m.context_section("pearl_test", [r], tmp_path)
    assert any("success rate" in line for line in lines) and (tmp_path / "pearl_test_success.png").exists()
    assert any("distance to the goal at the episode's end" in line for line in lines)
    gain = next(line for line in lines if "success rate, points: gain" in line).split("|")[3:6]
    assert gain[0].strip() == "" and all("±" in g for g in gain[1:])  # episodes 2 and 3 against episode 1
    lines = m.adaptation_section("pearl_test", [r], tmp_path)
    assert any("episode 2 - episode 1" in line for line in lines)
    longer = m.evaluate_run(run_dir, trials_per_task=2, seed=7, episodes_per_trial=5)
    assert longer["returns"].shape == (6, 5) and longer["successes"].shape == (6, 5)
    # the same seeds: the first trial's first three episodes are those of the default-length trial
    # (later trials follow on the worker's random streams, which the longer trials have used more of)
    np.testing.assert_array_equal(longer["returns"][0, :3], r["returns"][0])
    with pytest.raises(SystemExit, match="at least 1"):
        m.evaluate_run(run_dir, trials_per_task=2, seed=7, episodes_per_trial=0)


def test_runs_are_labelled_by_seed_steps_or_the_given_labels() -> None:
    m = load()

    class Cfg:
        def __init__(self, seed: int) -> None:
            self.seed = seed

    runs = [{"cfg": Cfg(1), "steps": 150_000}, {"cfg": Cfg(2), "steps": 150_000}]
    assert m.run_labels(runs) == ["seed 1", "seed 2"]
    runs[1]["cfg"] = Cfg(1)  # one seed at two budgets
    runs[1]["steps"] = 400_800
    assert m.run_labels(runs) == ["seed 1, 150,000 steps", "seed 1, 400,800 steps"]
    assert m.run_labels(runs, ["context 40", "context 256"]) == ["context 40", "context 256"]
