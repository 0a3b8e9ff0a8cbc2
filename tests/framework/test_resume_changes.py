"""What a resume does with a preset and with a mapping given on its command line: ``experiment=<preset>``
whose settings differ from the run's was accepted and its trainer settings dropped in silence (the run
went on with its own ``trainer.batch_size``), and ``'env.kwargs={max_episode_steps:10}'`` (or any
mapping value) was accepted and ignored, because two mappings compared by their ``name`` (None on
both sides)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.errors import ConfigError
from corral.framework.resume import check_overrides
from corral.testing.plugin import compose_config

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300
SMALL = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]",
         "trainer.progress=false"]
RL2_SMALL = ["experiment=rl2_bandits", "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.batch_size=200",
             "worker.n_envs=2", "algo.n_train_tasks=10", "algo.n_test_tasks=2", "algo.minibatch_size=100",
             "trainer.eval_every=0"]


def refusal(old: list[str], resume: list[str]) -> str:
    """check_overrides' line for resuming a run made with ``old`` by a command with ``resume``."""
    with pytest.raises(ConfigError) as info:
        check_overrides(compose_config(old), compose_config(resume), resume)
    return str(info.value)


@pytest.mark.parametrize("given", ["env.kwargs={max_episode_steps:10}", "env.kwargs={}"])
def test_a_mapping_is_compared_by_its_value(given: str) -> None:
    old = ["trainer.batch_size=200"] if given.endswith("{max_episode_steps:10}") else \
        ["trainer.batch_size=200", "env.kwargs={max_episode_steps:10}"]
    before = "{}" if given.endswith("{max_episode_steps:10}") else "{max_episode_steps: 10}"
    line = refusal(old, [given, "trainer.n_epochs=3"])
    assert f"would change it: {given} (the run has env.kwargs={before})." in line, line


def test_a_mapping_the_run_has_is_no_change() -> None:
    old = ["env.kwargs={max_episode_steps:10}"]
    resumed = check_overrides(compose_config(old), compose_config([*old, "trainer.n_epochs=3"]),
                              [*old, "trainer.n_epochs=3"])
    assert resumed.env.kwargs == {"max_episode_steps": 10} and resumed.trainer.n_epochs == 3


def test_a_list_is_compared_by_its_value() -> None:
    line = refusal([], ["policy.hidden_sizes=[8]"])
    assert "policy.hidden_sizes=[8] (the run has policy.hidden_sizes=[64, 64])" in line, line


def test_a_preset_whose_trainer_settings_differ_is_refused_with_the_keys_to_give() -> None:
    line = refusal(["trainer.batch_size=200"], ["experiment=ppo_cartpole", "trainer.n_epochs=3"])
    assert ("would change it: experiment=ppo_cartpole (it sets trainer.batch_size=2048 where the run has 200; a resume "
            "takes a change only as a key given by itself, e.g. trainer.batch_size=2048)." in line), line


def test_a_preset_names_the_options_and_settings_it_would_change() -> None:
    line = refusal(["trainer.batch_size=200"], ["experiment=rl2_bandits"])
    assert "(it sets algo=rl2_ppo where the run has ppo, env=bandits where the run has cartpole, policy=gru " in line
    assert "env.n_arms" not in line  # the option is named, not each of its fields


def test_the_runs_own_preset_with_its_own_settings_goes_on() -> None:
    resume = [*RL2_SMALL, "trainer.n_epochs=3"]
    resumed = check_overrides(compose_config(RL2_SMALL), compose_config(resume), resume)
    assert resumed.trainer.n_epochs == 3 and resumed.trainer.batch_size == 200 and resumed.worker.n_envs == 2


def test_the_runs_own_preset_without_its_own_settings_says_which_differ() -> None:
    line = refusal(RL2_SMALL, ["experiment=rl2_bandits", "trainer.n_epochs=3"])
    assert "(it sets worker.n_envs=16 where the run has 2, " in line and "trainer.batch_size=10000" in line, line
    assert "trainer.n_epochs" not in line.split("(it sets")[1]  # given by the command itself


# ---------------------------------------------------------------------------------------------- end to end


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``train.py`` as a user runs it (bounded)."""
    return subprocess.run([sys.executable, str(REPO / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PPO CartPole epoch of 200 steps."""
    run_dir = tmp_path_factory.mktemp("resume_changes") / "base"
    proc = train(run_dir.parent, *SMALL, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.mark.parametrize(("given", "expected"), [
    ("experiment=ppo_cartpole", "experiment=ppo_cartpole (it sets trainer.batch_size=2048 where the run has 200; "),
    ("env.kwargs={max_episode_steps:10}", "env.kwargs={max_episode_steps:10} (the run has env.kwargs={})."),
])
def test_train_py_refuses_what_the_resume_would_otherwise_drop(base_run: Path, tmp_path: Path, given: str,
                                                                expected: str) -> None:
    branch = tmp_path / "branch"
    proc = train(tmp_path, f"trainer.resume={base_run}", "trainer.n_epochs=2", given, f"hydra.run.dir={branch}")
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("corral: error: trainer.resume continues a run with the config it was started with")
    assert expected in lines[0], lines[0]
    assert not branch.exists()


def test_train_py_resumes_with_the_keys_given_one_by_one(base_run: Path, tmp_path: Path) -> None:
    branch = tmp_path / "branch"
    proc = train(tmp_path, f"trainer.resume={base_run}", "trainer.n_epochs=2", "experiment=ppo_cartpole",
                 "trainer.batch_size=300", f"hydra.run.dir={branch}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(branch / "progress.csv") as f:
        steps = [int(row["env_steps"]) for row in csv.DictReader(f)]
    assert len(steps) == 2 and steps[1] - steps[0] >= 300, steps  # the resumed epoch took trainer.batch_size=300
