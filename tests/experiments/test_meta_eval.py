"""experiments/meta_eval.py: the bandit baselines it compares RL2 with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

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
