"""``experiment=ppo_cartpole_optuna``: an Optuna sweep of PPO's learning rate and clip range reports the best."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")

ROOT = Path(__file__).resolve().parents[2]


def test_eight_trials_report_the_best_parameters(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=8",
           "trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
           "trainer.progress=false", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Best parameters:" in out and "Best value:" in out
    summaries = sorted((json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")),
                       key=lambda s: s["job"]["num"])
    assert len(summaries) == 8 and all(s["status"] == "completed" for s in summaries)
    lrs = {s["config"]["algo"]["learning_rate"] for s in summaries}
    assert len(lrs) == 8 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert all(0.05 <= s["config"]["algo"]["clip_range"] <= 0.4 for s in summaries)
    assert all(s["config"]["algo"]["name"] == "ppo" and s["config"]["env"]["id"] == "CartPole-v1" for s in summaries)
    # The objective is each trial's final evaluation return; the best one is reported.
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    best = max(summaries, key=lambda s: s["final_eval_return"])
    assert result["best_value"] == pytest.approx(best["final_eval_return"])
    assert result["best_params"]["algo.learning_rate"] == pytest.approx(best["config"]["algo"]["learning_rate"])
    assert result["best_params"]["algo.clip_range"] == pytest.approx(best["config"]["algo"]["clip_range"])
