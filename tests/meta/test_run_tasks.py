"""Which task a meta-RL environment runs when no task schedule sets one (docs/meta-rl.md):

- a plain algorithm (``algo=ppo env=point_nav``): the run's one task, ``env.task_seed``'s, in every
  environment of every worker, in the trainer's evaluation and in ``corral eval``;
- a trial-running worker (``worker=rl2``, ``worker=pearl``) without a schedule (the trainer's
  evaluation, ``corral eval``): a new task for every trial, so more episodes are more tasks;

plus ``env.goal_radius`` given where no reward depends on it (a warning) and ``env.n_arms``'s
declared minimum."""

from __future__ import annotations

import copy
import csv
import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from corral.framework.checks import field_check, field_problems
from corral.framework.config import config_of
from corral.framework.env import EnvFactory, EnvSpec, env_task_state
from corral.framework.evaluation import evaluation_factory
from corral.framework.plugins import get_registry
from corral.framework.worker import WorkerFactory
from corral.meta.task_envs import make_task_env
from corral.meta.tasks import SetTask, TaskSchedule, TaskSplit
from corral.plugins.envs.bandits import BanditsEnvConfig
from corral.plugins.policies.gru import GRUPolicy
from corral.plugins.policies.pearl import PEARLPolicy
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.pearl import PEARLWorker
from corral.plugins.workers.rl2 import RL2Worker
from corral.plugins.workers.vec import VecWorker

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None
TASK_ENVS = ["point_nav", "bandits"] + (["half_cheetah_vel", "half_cheetah_dir"] if HAS_MUJOCO else [])


def env_factory(name: str, **fields: object) -> EnvFactory:
    """The environment source ``env=<name>`` with ``fields`` makes."""
    reg = get_registry().get("env", name)
    return reg.factory(config_of(reg, fields))


def task_key(env: object) -> str:
    """The current task of ``env`` as comparable text."""
    state = env_task_state(env)  # type: ignore[arg-type]
    assert state is not None
    return repr({k: np.round(np.asarray(v, dtype=np.float64), 12).tolist() for k, v in state[0].items()})


def tasks_of_workers(factories: list[WorkerFactory], env: EnvFactory, worker_number: int = 0) -> list[str]:
    """The task each environment of worker ``worker_number`` of each factory runs, after one rollout."""
    keys = []
    for factory in factories:
        worker = factory(worker_number)
        try:
            worker.update_env(env)
            worker.update_agent(_random_policy(env))
            worker.rollout()
            keys.extend(task_key(e) for e in worker.envs)
        finally:
            worker.shutdown()
    return keys


def _random_policy(env: EnvFactory) -> object:
    from corral.plugins.policies.mlp import MLPPolicy

    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(env()))


# ---------------------------------------------------------------------- a plain algorithm: the run's task
@pytest.mark.parametrize("name", TASK_ENVS)
def test_every_environment_of_a_run_and_its_evaluation_run_the_same_task(name: str) -> None:
    """Two training workers of 3 environments each and the evaluation workers (another seed branch)
    all run ``env.task_seed``'s task; another task_seed is another task. Before, each environment drew
    its own task from its own seed at its first reset: every slot and the evaluation ran another one."""
    env = env_factory(name)
    run = WorkerFactory(seed=3, n_workers=2, worker_class=VecWorker, worker_args={"n_envs": 3})
    keys = (tasks_of_workers([run], env, 0) + tasks_of_workers([run], env, 1)
            + tasks_of_workers([evaluation_factory(run), evaluation_factory(run, seed=5)], env))
    assert len(keys) == 3 + 3 + 3 + 3
    probe = env()
    try:  # an environment on its own, with another reset seed: the same task
        probe.reset(seed=12345)
        probe.step(probe.action_space.sample())
        expected = task_key(probe)
    finally:
        probe.close()
    assert set(keys) == {expected}
    if name in ("point_nav", "bandits"):
        from corral.meta.task_envs import run_task

        assert expected == repr({k: np.round(np.asarray(v, dtype=np.float64), 12).tolist()
                                 for k, v in run_task(env().unwrapped, 0).items()})
    if name != "half_cheetah_dir":  # two tasks only: another seed may draw the same direction
        other = tasks_of_workers([run], env_factory(name, task_seed=1))
        assert set(other) != set(keys) and len(set(other)) == 1


@pytest.mark.skipif(not HAS_MUJOCO, reason="needs MuJoCo (pip install 'corral[mujoco]')")
def test_half_cheetah_dir_task_seed_picks_either_direction() -> None:
    directions = set()
    for seed in range(8):
        env = env_factory("half_cheetah_dir", task_seed=seed)()
        env.reset(seed=0)
        env.step(np.zeros(env.action_space.shape))
        directions.add(env.unwrapped.get_task()["direction"])
        env.close()
    assert directions == {1.0, -1.0}


def test_set_task_still_wins_over_the_runs_task() -> None:
    env = env_factory("point_nav")()
    env.unwrapped.set_task({"goal": np.array([0.0, 1.0])})
    env.reset(seed=0)
    assert env.unwrapped.goal.tolist() == [0.0, 1.0]


def test_corral_eval_of_a_plain_run_evaluates_the_task_it_trained_on(tmp_path: Path) -> None:
    """``train.py env=point_nav`` (PPO): the trainer's evaluation and ``corral eval`` (any --seed) give the
    training task's return and say which task it is. Before, the evaluation ran another goal than
    training (a worse return than training's) and corral eval's --seed changed the goal."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(TRAIN), "env=point_nav", "trainer.n_epochs=2", "trainer.batch_size=400",
         "trainer.eval_every=1", "trainer.eval_episodes=2", "worker=vec", "worker.n_envs=2", "logger=[csv]",
         f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(open(run_dir / "progress.csv")))
    trained = float(rows[-1]["eval/return_mean"])
    results = []
    for seed in ("1", "7"):
        out = subprocess.run([sys.executable, "-m", "corral.framework.cli", "eval", str(run_dir), "--episodes", "3",
                              "--seed", seed, "--json", "-o", ""],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        results.append(json.loads(out.stdout))
    assert [r["return_mean"] for r in results] == pytest.approx([trained, trained])
    assert all("env.task_seed=0" in r["tasks"] for r in results)
    # and the run's own training workers held that goal: a worker of the run's factory and an evaluation
    # worker, made from the run's saved config, run the same task
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    env = env_factory("point_nav", **{k: v for k, v in OmegaConf.to_container(cfg.env).items() if k != "name"})
    run = WorkerFactory(seed=int(cfg.seed), n_workers=1, worker_class=DefaultWorker)
    assert len(set(tasks_of_workers([run, evaluation_factory(run)], env))) == 1


# ---------------------------------------------------------------------- trial workers: a new task per trial
POINT = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv",
                                   "max_episode_steps": 5})
POINT_RL2 = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv",
                                       "max_episode_steps": 5, "rl2_inputs": True})


def _pearl_worker(seed: int = 1, n_envs: int = 2) -> PEARLWorker:
    torch.manual_seed(0)
    worker = WorkerFactory(seed=seed, n_workers=1, worker_class=PEARLWorker,
                           worker_args={"n_episodes_per_trial": 3, "n_envs": n_envs})(0)
    worker.update_env(POINT)
    policy = PEARLPolicy(EnvSpec.from_env(POINT()), hidden_sizes=[8], encoder_hidden_sizes=[8], latent_size=2)
    policy.deterministic = True
    worker.update_agent(policy)
    return worker


def _rl2_worker(seed: int = 1, n_envs: int = 2) -> RL2Worker:
    torch.manual_seed(0)
    worker = WorkerFactory(seed=seed, n_workers=1, worker_class=RL2Worker,
                           worker_args={"n_episodes_per_trial": 2, "n_envs": n_envs})(0)
    worker.update_env(POINT_RL2)
    policy = GRUPolicy(EnvSpec.from_env(POINT_RL2()), hidden_size=8)
    policy.deterministic = True
    worker.update_agent(policy)
    return worker


def _goals_per_trial(worker: object, n_trials: int, per_trial: int) -> list[tuple[float, ...]]:
    """The goal of each of the next ``n_trials`` trials (one rollout of one trial at a time)."""
    goals = []
    for _ in range(n_trials):
        worker.rollout(n_episodes=per_trial)  # type: ignore[attr-defined]
        goals.append(tuple(np.round(worker.envs[0].unwrapped.goal, 12).tolist()))  # type: ignore[attr-defined]
    return goals


def test_pearl_without_a_schedule_runs_a_new_task_every_trial() -> None:
    """Deterministic PEARL trials without a schedule (what corral eval runs): 5 trials over 2 slots
    are 5 different tasks, so no trial repeats an earlier one. Before, each slot kept the task its
    environment drew at its first reset, and trial 2 of slot 0 repeated trial 0 exactly."""
    worker = _pearl_worker()
    try:
        batch = worker.rollout(n_episodes=15)
    finally:
        worker.shutdown()
    returns = np.add.reduceat(batch.rewards.astype(np.float64), batch.starts).reshape(5, 3)
    assert len({tuple(np.round(r, 9)) for r in returns}) == 5
    assert (batch.episode_infos["task_id"] == -1).all()
    worker = _pearl_worker(n_envs=1)
    try:
        assert len(set(_goals_per_trial(worker, 4, 3))) == 4
    finally:
        worker.shutdown()


def test_rl2_without_a_schedule_runs_a_new_task_every_trial() -> None:
    worker = _rl2_worker(n_envs=1)
    try:
        assert len(set(_goals_per_trial(worker, 4, 1))) == 4
    finally:
        worker.shutdown()
    worker = _rl2_worker(n_envs=2)
    try:
        batch = worker.rollout(n_episodes=6)
    finally:
        worker.shutdown()
    returns = np.add.reduceat(batch.rewards.astype(np.float64), batch.starts)
    assert len(set(np.round(returns, 9).tolist())) == 6


def test_trial_tasks_are_seeded_restored_and_left_to_a_schedule_or_set_task() -> None:
    """The drawn tasks are a function of the seed (the same worker twice: the same tasks; a restored
    worker continues them); a schedule's tasks and a SetTask's task are run as given."""
    a, b = _pearl_worker(), _pearl_worker()
    try:
        assert a.rollout(n_episodes=6).differences(b.rollout(n_episodes=6)) == []
        state = copy.deepcopy(a.state_dict())
        following = a.rollout(n_episodes=6)
        fresh = _pearl_worker(seed=9)
        fresh.load_state_dict(copy.deepcopy(state))
        assert fresh.rollout(n_episodes=6).differences(following) == []
        fresh.shutdown()
        split = TaskSplit(n_train=4, n_test=2, seed=0)
        a.update_env(TaskSchedule(split, (1,), "test"))
        batch = a.rollout(n_episodes=6)
        assert batch.episode_infos["task_id"].tolist() == [5] * 6
        a.update_env(SetTask({"goal": np.array([0.0, 0.5])}, task_id=42))
        batch = a.rollout(n_episodes=6)
        assert batch.episode_infos["task_id"].tolist() == [42] * 6
        assert all(e.unwrapped.goal.tolist() == [0.0, 0.5] for e in a.envs)
    finally:
        a.shutdown()
        b.shutdown()


# ---------------------------------------------------------------------- goal_radius, n_arms
def _cfg(**groups: dict) -> object:
    return OmegaConf.create(groups)


def _ignored(cfg: object, given: set[str]) -> list[str]:
    """The values among ``given`` that the composed-like ``cfg`` would ignore (each field's ``applies_if``)."""
    from corral.framework.checks import composed_ignored
    from corral.framework.registry import KINDS

    return composed_ignored(cfg, get_registry(), KINDS, given)


def test_goal_radius_given_where_no_reward_depends_on_it_is_named() -> None:
    """``env.goal_radius``'s ``applies_if`` (was a hand-written validate hook, ``goal_radius_unused``)."""
    dense = _cfg(env={"name": "point_nav", "sparse": False, "goal_radius": 0.5}, worker={"name": "default"})
    (message,) = _ignored(dense, {"env", "env.goal_radius"})
    assert message.startswith("env.goal_radius=0.5 has no effect while env.sparse=false")
    assert "env.sparse=true" in message and "default (0.2)" in message
    assert _ignored(dense, {"env"}) == []  # not given: a preset's or the default
    sparse = _cfg(env={"name": "point_nav", "sparse": True, "goal_radius": 0.5}, worker={"name": "default"})
    assert _ignored(sparse, {"env.goal_radius"}) == []
    for reads in ("sparse_reward", "success"):
        pearl = _cfg(env={"name": "point_nav", "sparse": False, "goal_radius": 0.5},
                     worker={"name": "pearl", "context_reward": reads})
        assert _ignored(pearl, {"env.goal_radius"}) == []
    pearl = _cfg(env={"name": "point_nav", "sparse": False, "goal_radius": 0.5},
                 worker={"name": "pearl", "context_reward": None})
    assert "worker.context_reward=null" in str(_ignored(pearl, {"env.goal_radius"}))


def test_train_py_warns_about_a_dense_goal_radius_once(tmp_path: Path) -> None:
    runs = {}
    for extra in ([], ["env.sparse=true"]):
        done = subprocess.run(
            [sys.executable, str(TRAIN), "env=point_nav", "env.goal_radius=0.5", *extra, "trainer.n_epochs=1",
             "trainer.batch_size=40", "trainer.eval_every=0", "logger=[csv]",
             f"hydra.run.dir={tmp_path / str(len(extra))}"],
            capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        runs[bool(extra)] = [line for line in done.stderr.splitlines() if "goal_radius" in line]
    assert runs[True] == []
    assert len(runs[False]) == 1 and runs[False][0].startswith(
        "corral: warning: env.goal_radius=0.5 has no effect while env.sparse=false")


def test_n_arms_declares_its_real_minimum() -> None:
    """``env.n_arms=1`` is refused by the field's own declaration (``corral plugins`` shows >= 2), as the
    environment refuses it; it was declared ``>= 1``."""
    n_arms = next(f for f in dataclasses.fields(BanditsEnvConfig) if f.name == "n_arms")
    spec = field_check(n_arms)
    assert spec is not None and spec.ge == 2
    assert field_problems(BanditsEnvConfig, {"n_arms": 1}, "env") == ["env.n_arms must be >= 2, got 1"]
    assert field_problems(BanditsEnvConfig, {"n_arms": 2}, "env") == []


def test_task_seed_given_with_a_trial_worker_is_named() -> None:
    """``env.task_seed`` picks the task of an algorithm that sets none; a trial worker's trials never
    run it, so given with one it is one warning line (nothing said when it was not given). Its
    ``applies_if`` says so (was a hand-written validate hook of the rl2 and pearl workers)."""
    for worker in ("rl2", "pearl"):
        cfg = OmegaConf.create({"env": {"name": "bandits", "task_seed": 3}, "worker": {"name": worker}})
        (message,) = _ignored(cfg, {"env.task_seed"})
        assert message.startswith(f"env.task_seed=3 has no effect while worker={worker}")
        assert _ignored(cfg, {"env.n_arms"}) == []
        assert _ignored(cfg, set()) == []
    plain = OmegaConf.create({"env": {"name": "bandits", "task_seed": 3}, "worker": {"name": "vec"}})
    assert _ignored(plain, {"env.task_seed"}) == []
