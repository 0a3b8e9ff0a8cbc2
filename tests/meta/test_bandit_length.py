"""A task env's own length option (bandits' ``n_pulls``) and ``env.max_episode_length``: one sets the
episode length; giving both with different values is one error line, not one of them dropped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.config import config_of
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry

TRAIN = Path(__file__).resolve().parents[2] / "train.py"


def test_n_pulls_and_a_different_max_episode_length_is_one_line_before_anything(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "experiment=rl2_bandits", "trainer.n_epochs=1", "trainer.batch_size=200",
         "env.n_pulls=10", "env.max_episode_length=3", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "corral: error: env.n_pulls=10 and env.max_episode_length=3 disagree: env.n_pulls sets a bandit episode's "
        "length (pulls per episode); drop env.max_episode_length (or give it the same value)"
    ]
    assert not run_dir.exists() and "epoch" not in proc.stdout


def test_n_pulls_sets_the_length_and_an_equal_max_episode_length_is_fine() -> None:
    reg = get_registry().get("env", "bandits")
    for fields in ({"n_pulls": 3}, {"n_pulls": 3, "max_episode_length": 3}):
        env = reg.factory(config_of(reg, fields))()
        assert EnvSpec.from_env(env).max_episode_length == 3
    with pytest.raises(ConfigError, match=r"env.n_pulls=10 and env.max_episode_length=20 disagree"):
        config_of(reg, {"n_pulls": 10, "max_episode_length": 20})
