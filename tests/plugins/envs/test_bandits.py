"""``env=bandits``: Bernoulli bandits with the task protocol."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corral.framework.config import config_of
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry
from corral.plugins.envs.bandits import BernoulliBanditEnv

TRAIN = Path(__file__).resolve().parents[3] / "train.py"


def build(**fields):
    reg = get_registry().get("env", "bandits")
    return reg.factory(config_of(reg, fields))()


def test_registered_option_builds_bandits_with_episode_length_and_rl2_inputs() -> None:
    env = build(n_arms=3, n_pulls=4)
    spec = EnvSpec.from_env(env)
    assert spec.max_episode_length == 4 and spec.action_space.n == 3 and spec.observation_space.shape == (1,)
    wrapped = build(n_arms=3, rl2_inputs=True)
    assert wrapped.observation_space.shape == (1 + 3 + 2,)


def test_rewards_follow_the_task_probabilities() -> None:
    env = BernoulliBanditEnv(n_arms=3)
    env.reset(seed=0)
    env.set_task({"probs": np.array([0.0, 1.0, 0.25])})
    assert [env.step(0)[1] for _ in range(20)] == [0.0] * 20
    assert [env.step(1)[1] for _ in range(20)] == [1.0] * 20
    mean = np.mean([env.step(2)[1] for _ in range(4000)])
    assert abs(mean - 0.25) < 0.03


def test_sample_tasks_is_seeded_and_set_task_validates() -> None:
    env = BernoulliBanditEnv(n_arms=4)
    a = env.sample_tasks(5, np.random.default_rng(1))
    b = env.sample_tasks(5, np.random.default_rng(1))
    assert all(np.array_equal(x["probs"], y["probs"]) for x, y in zip(a, b))
    assert all(x["probs"].shape == (4,) and ((0 <= x["probs"]) & (x["probs"] <= 1)).all() for x in a)
    with pytest.raises(ValueError, match="4 probabilities"):
        env.set_task({"probs": [0.5, 0.5]})
    with pytest.raises(ConfigError, match="n_arms"):
        BernoulliBanditEnv(n_arms=1)


def test_n_pulls_not_given_lets_max_episode_length_set_the_length() -> None:
    """``env.n_pulls`` is null unless given, so ``env.max_episode_length`` alone sets a bandit episode's
    length (it was refused: the default n_pulls=1 "disagreed" with it), and neither given is 1 pull."""
    assert EnvSpec.from_env(build(max_episode_length=4)).max_episode_length == 4
    assert EnvSpec.from_env(build()).max_episode_length == 1
    assert EnvSpec.from_env(build(n_pulls=3, max_episode_length=3)).max_episode_length == 3
    with pytest.raises(ConfigError, match=r"^env.n_pulls=1 and env.max_episode_length=4 disagree"):
        build(n_pulls=1, max_episode_length=4)  # given both, a given n_pulls=1 is not taken for the default


def test_train_py_with_only_max_episode_length_runs_episodes_of_that_many_pulls(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "env=bandits", "env.max_episode_length=20", "trainer.n_epochs=1",
         "trainer.batch_size=100", "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]",
         f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "corral: warning" not in proc.stderr and "corral: error" not in proc.stderr, proc.stderr
    with open(run_dir / "progress.csv", newline="") as f:
        assert [float(r["train/episode_length"]) for r in csv.DictReader(f)] == [20.0]


def test_max_episode_length_against_a_preset_s_n_pulls_names_the_preset(tmp_path: Path) -> None:
    """``experiment=rl2_bandits`` sets ``env.n_pulls=1``: ``env.max_episode_length=20`` on the command line is
    one line that names what the user gave and where n_pulls=1 came from, for a run and a sweep's job."""
    from corral.framework.entry import prepare
    from corral.framework.precheck import precheck

    line = ("env.max_episode_length=20: experiment=rl2_bandits sets env.n_pulls=1, which sets a bandit episode's "
            "length (pulls per episode); give env.n_pulls=20 instead of env.max_episode_length")
    with pytest.raises(ConfigError) as info:
        precheck(prepare(["experiment=rl2_bandits", "env.max_episode_length=20", f"hydra.run.dir={tmp_path / 'run'}"]))
    assert str(info.value) == line
    with pytest.raises(ConfigError) as info:
        precheck(prepare(["-m", "experiment=rl2_bandits", "env.max_episode_length=1,20",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"]))
    assert str(info.value) == f"{line} (the sweep's job env.max_episode_length=20; no job has started)"
    precheck(prepare(["experiment=rl2_bandits", "env.max_episode_length=1", f"hydra.run.dir={tmp_path / 'run'}"]))
    precheck(prepare(["experiment=rl2_bandits", "env.n_pulls=20", "env.max_episode_length=20",
                      f"hydra.run.dir={tmp_path / 'run'}"]))
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
