"""``corral eval <run> key=value`` reads and applies an override as ``train.py`` does, and says in one
line what it cannot evaluate: ``'env.kwargs={max_episode_steps:20}'`` was read as YAML (a keyword
``max_episode_steps:20``); ``env.n_arms=3`` on a 5-armed bandit run ended in torch's 30-line size
mismatch; ``worker.n_prior_episodes=0`` on a PEARL run got training's line about context buffers."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.errors import ConfigError
from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300
tiny_runs = import_path(REPO / "tests" / "conf" / "tiny_runs.py", "tiny_runs")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it (bounded)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def corral_eval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "corral.framework.cli", "eval", *args, "-o", ""], cwd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO CartPole run of one tiny epoch (``ppo``)."""
    where = tmp_path_factory.mktemp("eval_overrides")
    tiny_runs.train(where / "ppo", "trainer.n_epochs=1", "trainer.batch_size=200")
    return where


@pytest.fixture
def meta(tiny_meta_runs: Path) -> Path:
    """An RL2 run on 5-armed bandits (``rl2``) and a PEARL point-robot run (``pearl``), one tiny epoch each
    (``tests/conftest.py``)."""
    return tiny_meta_runs


def test_a_mapping_is_read_with_hydras_grammar(runs: Path) -> None:
    proc = corral_eval(str(runs / "ppo"), "env.kwargs={max_episode_steps:20}", "--episodes", "2", "--json", cwd=runs)
    assert proc.returncode == 0, proc.stderr
    assert '"lengths": [\n    20,\n    20\n  ]' in proc.stdout, proc.stdout


@pytest.mark.parametrize(("override", "says"), [
    ("env.max_episode_length=[1", "env.max_episode_length=[1: no viable alternative at input '[1'"),
    ("env.max_episode_length=3,4", "env.max_episode_length=3,4: corral eval evaluates one setting, not a sweep of "
                                   "several; run it once for each value"),
])
def test_an_override_hydra_cannot_read_or_a_sweep_is_one_line(runs: Path, override: str, says: str) -> None:
    from corral.framework.eval_run import evaluate_run

    with pytest.raises(ConfigError) as caught:
        evaluate_run(runs / "ppo", [override], episodes=1, output="")
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value), str(caught.value)


def test_an_override_that_changes_the_spaces_is_one_line(meta: Path) -> None:
    proc = corral_eval(str(meta / "rl2"), "env.n_arms=3", "--episodes", "1", cwd=meta)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("corral eval: error: env.n_arms=3 changes the environment's spaces to observations "
                               "Box("), lines[0]
    assert "(6,), float32), actions Discrete(3), and the run's policy takes observations Box(" in lines[0]
    assert lines[0].endswith("(8,), float32), actions Discrete(5), which it was trained on; evaluate with env.* "
                             "settings that keep the spaces, or train a run with env.n_arms=3"), lines[0]
    same = corral_eval(str(meta / "rl2"), "env.n_arms=5", "--episodes", "1", cwd=meta)
    assert same.returncode == 0, same.stderr
    assert "run in the environment with" not in same.stdout, same.stdout  # the run's own value: its tasks


def test_an_env_override_of_a_meta_rl_run_says_its_tasks_are_not_the_runs(meta: Path) -> None:
    """A PEARL point-robot run evaluated with its goals farther away (env.goal_distance): the same held-out task
    ids, other goals; the tasks: line says so instead of claiming the run's meta-eval (it said nothing)."""
    proc = corral_eval(str(meta / "pearl"), "env.goal_distance=2.0", "--episodes", "2", cwd=meta)
    assert proc.returncode == 0, proc.stderr
    (tasks,) = [line for line in proc.stdout.splitlines() if line.startswith("tasks: ")]
    assert tasks.startswith("tasks: the run's 2 held-out meta-test tasks (ids 4-5, algo.task_seed=0)"), tasks
    assert tasks.endswith("; run in the environment with env.goal_distance=2.0 (the run's: 1.0): not the environment "
                          "of the run's meta-eval, so its meta_eval numbers are not repeated"), tasks


def test_parameters_that_do_not_fit_the_rebuilt_policy_are_one_line(meta: Path) -> None:
    """What the spaces check stands before: the snapshot's parameters loaded into a policy of other sizes."""
    from corral.framework.eval_run import _load_weights, _run_config
    from corral.framework.plugins import get_plugin_manager
    from corral.framework.trainer import find_snapshot
    from corral.testing.plugin import build_run

    get_plugin_manager()  # as evaluate_run: the plugins' snapshot types are registered before the snapshot is read
    snapshot = find_snapshot(meta / "rl2")
    cfg, _ = _run_config(snapshot, meta / "rl2", ["env.n_arms=3"], trust=False)
    rebuilt = build_run(cfg)
    try:
        with pytest.raises(ConfigError) as caught:
            _load_weights(rebuilt, snapshot, False, ["env.n_arms=3"])
    finally:
        rebuilt.close()
    line = str(caught.value)
    assert line.startswith(f"the parameters of {snapshot} do not fit the policy built for the evaluation (env.n_arms=3 "
                           "changed it): size mismatch for "), line
    assert "\n" not in line and line.endswith("evaluate with settings that keep the spaces and sizes the run was "
                                              "trained with")


def test_no_prior_episodes_is_refused_with_the_evaluations_own_line(meta: Path) -> None:
    proc = corral_eval(str(meta / "pearl"), "worker.n_prior_episodes=0", "--episodes", "3", cwd=meta)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "corral eval: error: worker.n_prior_episodes=0: corral eval starts each trial with an empty context, whose "
        "posterior is the prior, so the first episode acts on the prior either way and 0 evaluates exactly as "
        "worker.n_prior_episodes=1, the run's own value; leave it out"], proc.stderr
    other = corral_eval(str(meta / "pearl"), "worker.n_prior_episodes=2", "--episodes", "3", cwd=meta)
    assert other.returncode == 0, other.stderr


@pytest.mark.parametrize("deterministic", [True, False])
def test_no_prior_episodes_evaluates_as_one(meta: Path, deterministic: bool) -> None:
    """What the line above says: the evaluation's episodes of n_prior_episodes=0 are those of 1."""
    from corral.framework.eval_run import _load_weights, _run_config
    from corral.framework.evaluation import evaluation_episodes, evaluation_factory
    from corral.framework.plugins import get_plugin_manager
    from corral.framework.trainer import find_snapshot
    from corral.testing.plugin import build_run

    get_plugin_manager()  # as evaluate_run: the plugins' snapshot types are registered before the snapshot is read
    snapshot = find_snapshot(meta / "pearl")
    cfg, _ = _run_config(snapshot, meta / "pearl", [], trust=False)
    rebuilt = build_run(cfg)
    try:
        _load_weights(rebuilt, snapshot, False)
        returns = []
        for prior in (1, 0, 2):
            factory = evaluation_factory(rebuilt.worker_factory, seed=3)
            factory = dataclasses.replace(factory, worker_args={**factory.worker_args, "n_prior_episodes": prior})
            batch = evaluation_episodes(rebuilt.algo.eval_policy, rebuilt.env, factory, 6, deterministic=deterministic)
            returns.append([float(r) for r in batch.episode_returns])
    finally:
        rebuilt.close()
    assert returns[0] == returns[1] and returns[2] != returns[0]  # and the setting is live: 2 is another evaluation
