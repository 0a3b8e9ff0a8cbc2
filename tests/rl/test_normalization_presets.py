"""The MuJoCo PPO presets (normalised), their SB3 peer mapping (VecNormalize), and tiny real runs.

MuJoCo parts need the ``mujoco`` extra (in ``dev``), SB3 parts the ``bench`` extra; without them
they skip.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from corral.testing.modules import import_path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {"ppo_halfcheetah": ("HalfCheetah-v5", 2000), "ppo_hopper": ("Hopper-v5", 2048),
           "ppo_walker2d": ("Walker2d-v5", 2048)}


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    """experiments/peers/sb3_runner.py as a module."""
    return import_path(ROOT / "experiments" / "peers" / "sb3_runner.py", "corral_tests_normalization_sb3_runner")


def composed(*overrides: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from corral.testing.plugin import compose_config

    return OmegaConf.to_container(compose_config(list(overrides)), resolve=True)  # type: ignore[return-value]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_normalise_and_map_to_vecnormalize(runner: ModuleType, preset: str) -> None:
    env_id, batch = PRESETS[preset]
    cfg = composed(f"experiment={preset}")
    assert cfg["env"]["id"] == env_id and cfg["trainer"]["batch_size"] == batch
    assert cfg["normalize"]["obs"] is True and cfg["normalize"]["reward"] is True
    assert cfg["trainer"]["max_env_steps"] == 1_000_000
    spec = runner.sb3_spec(cfg)
    assert spec.normalize == {"norm_obs": True, "norm_reward": True, "clip_obs": 10.0, "clip_reward": 10.0,
                              "gamma": 0.99, "epsilon": 1e-8}
    assert spec.kwargs["n_steps"] == batch and spec.kwargs["batch_size"] == 64 and spec.kwargs["n_epochs"] == 10
    # The same value loss: corral's vf_coef * 0.5 * mse is SB3's (vf_coef / 2) * mse, SB3's default 0.5.
    assert cfg["algo"]["vf_coef"] == 1.0 and spec.kwargs["vf_coef"] == 0.5
    assert spec.total_steps == 1_000_000 and (spec.eval_every, spec.eval_episodes) == (10, 5)


def test_runs_without_normalize_map_to_plain_environments(runner: ModuleType) -> None:
    assert runner.sb3_spec(composed("experiment=sac_halfcheetah")).normalize is None
    spec = runner.sb3_spec(composed("experiment=ppo_cartpole", "normalize.reward=true", "normalize.gamma=0.9"))
    assert spec.normalize is not None and spec.normalize["norm_obs"] is False and spec.normalize["gamma"] == 0.9


def test_hopper_preset_trains_with_normalisation(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    cmd = [sys.executable, str(ROOT / "train.py"), "experiment=ppo_hopper", "trainer.max_env_steps=2048",
           "trainer.eval_every=1", "trainer.eval_episodes=1", "algo.n_epochs=1", "logger=[csv]",
           "trainer.progress=false", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "progress.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["normalize/obs_std_mean"]) > 0 and float(row["normalize/return_std"]) > 0
    assert float(row["env_steps"]) >= 2048 and "eval/return_mean" in row


def test_learning_py_peer_sb3_runs_vecnormalize(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    import shutil
    import uuid

    name = f"test_norm_{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, str(ROOT / "experiments" / "learning.py"), "--name", name, "--seeds", "1",
           "--threshold", "475", "--results-dir", str(tmp_path), "--peer", "sb3", "--time-target", "0.7", "--",
           "experiment=ppo_cartpole", "normalize.obs=true", "normalize.reward=true", "trainer.max_env_steps=2048",
           "trainer.eval_every=1", "trainer.eval_episodes=2"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
        assert proc.returncode == 0, proc.stderr[-3000:]
        md = (tmp_path / f"{name}.md").read_text()
        assert "in VecNormalize({'norm_obs': True, 'norm_reward': True" in md
        assert "the <= 0.7x target" in md
        rows = (ROOT / "experiments" / "runs" / name / "sb3_seed1" / "progress.csv").read_text().splitlines()
        assert "eval/return_mean" in rows[0] and len(rows) == 2
        # --record-only writes the same table from those runs, training nothing.
        again = tmp_path / "again"
        record = [*cmd[:cmd.index("--results-dir")], "--results-dir", str(again), "--record-only",
                  *cmd[cmd.index("--results-dir") + 2:]]
        proc = subprocess.run(record, cwd=ROOT, capture_output=True, text=True, timeout=280)
        assert proc.returncode == 0, proc.stderr[-3000:]
        table = [line for line in md.splitlines() if line.startswith(("| corral |", "| sb3 |"))]
        again_md = (again / f"{name}.md").read_text()
        assert table and all(line.rsplit("|", 2)[0] in again_md for line in table)  # all but wall_s
        assert "in VecNormalize({'norm_obs': True" in again_md
    finally:
        shutil.rmtree(ROOT / "experiments" / "runs" / name, ignore_errors=True)
