"""Task splits, schedules and samplers (corral/meta/tasks.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from corral.framework.env import current_task_id
from corral.framework.errors import ConfigError
from corral.meta.task_envs import make_task_env
from corral.meta.tasks import SetTask, TaskSampler, TaskSchedule, TaskSplit, spread

BANDITS = "corral.plugins.envs.bandits:BernoulliBanditEnv"
POINT = "corral.plugins.envs.point_nav:PointNavEnv"


def bandits(**kwargs):
    return make_task_env(BANDITS, 1, **kwargs)


def test_split_is_seeded_and_disjoint() -> None:
    split = TaskSplit(n_train=50, n_test=10, seed=3)
    a, b = split.all_tasks(bandits()), split.all_tasks(bandits())
    for which in ("train", "test"):
        assert [t.id for t in a[which]] == [t.id for t in b[which]]
        assert all(np.array_equal(x.params["probs"], y.params["probs"]) for x, y in zip(a[which], b[which]))
    assert [t.id for t in a["train"]] == list(range(50))
    assert [t.id for t in a["test"]] == list(range(50, 60))
    train = {tuple(t.params["probs"]) for t in a["train"]}
    assert not any(tuple(t.params["probs"]) in train for t in a["test"])
    other = TaskSplit(n_train=50, n_test=10, seed=4).all_tasks(bandits())
    assert not np.array_equal(other["train"][0].params["probs"], a["train"][0].params["probs"])


def test_split_rejects_overlapping_tasks_and_bad_sizes() -> None:
    class TwoTasks(type(bandits().unwrapped)):  # a distribution with only two tasks
        def sample_tasks(self, n, rng=None):
            return [{"probs": np.full(self.n_arms, float(i % 2))} for i in range(n)]

    with pytest.raises(ConfigError, match="equal meta-train tasks"):
        TaskSplit(n_train=2, n_test=2).all_tasks(TwoTasks())
    with pytest.raises(ConfigError, match="n_train_tasks"):
        TaskSplit(n_train=0, n_test=2)
    # n_test=0: finite task sets are meta-tested on their meta-train tasks
    split = TaskSplit(n_train=2, n_test=0)
    env = TwoTasks()
    assert split.tasks(env, "test") == split.tasks(env, "train") and split.n("test") == 2


def test_schedule_sets_tasks_and_records_ids() -> None:
    split = TaskSplit(n_train=5, n_test=3, seed=1)
    env = bandits()
    schedule = TaskSchedule(split, (4, 2), "train")
    schedule(env)
    assert current_task_id(env) == 4
    assert np.array_equal(env.unwrapped.probs, split.tasks(env, "train")[4].params["probs"])
    assert schedule.apply(env, 1).id == 2 and current_task_id(env) == 2
    assert schedule.apply(env, 2).id == 4  # cycles
    test = TaskSchedule(split, (0,), "test")
    test(env)
    assert current_task_id(env) == 5  # meta-test ids follow the meta-train ids
    SetTask({"probs": np.full(5, 0.5)}, task_id=77)(env)
    assert current_task_id(env) == 77
    assert pickle.loads(pickle.dumps(schedule)) == schedule  # travels to worker processes


def test_schedule_carries_a_known_context_per_task() -> None:
    split = TaskSplit(n_train=5, n_test=3, seed=1)
    known = {"observations": np.zeros((3, 2)), "actions": np.ones((3, 2)), "rewards": np.arange(3.0)}
    schedule = TaskSchedule(split, (4, 2), "train", contexts=(known, None))
    assert schedule.context(0) is known and schedule.context(1) is None
    assert schedule.context(2) is known  # cycles with the tasks
    assert TaskSchedule(split, (4, 2), "train").context(0) is None
    assert schedule == TaskSchedule(split, (4, 2), "train")  # the contexts do not make another schedule
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(schedule)).context(0)["rewards"], known["rewards"])
    with pytest.raises(ValueError, match="2 tasks got 1 contexts"):
        TaskSchedule(split, (4, 2), "train", contexts=(known,))


def test_sampler_spreads_one_schedule_per_worker_deterministically() -> None:
    split = TaskSplit(n_train=100, n_test=5, seed=0)
    sampler = TaskSampler(split, seed=7)
    updates = sampler.env_updates(3, n_workers=4, tasks_per_worker=6)
    assert isinstance(updates, list) and len(updates) == 4
    assert all(isinstance(u, TaskSchedule) and len(u) == 6 and u.which == "train" for u in updates)
    assert updates == TaskSampler(split, seed=7).env_updates(3, n_workers=4, tasks_per_worker=6)
    assert updates != sampler.env_updates(4, n_workers=4, tasks_per_worker=6)
    assert len({u.indices for u in updates}) == 4  # workers get different tasks
    assert all(0 <= i < 100 for u in updates for i in u.indices)
    assert spread(["a", "b"], 3) == ["a", "b", "a"]


def test_other_environments_resolve_their_own_tasks() -> None:
    env = make_task_env(POINT, 20)
    tasks = TaskSplit(n_train=4, n_test=2, seed=0).tasks(env, "test")
    assert [t.id for t in tasks] == [4, 5]
    for t in tasks:
        assert t.params["goal"].shape == (2,) and t.params["goal"][1] >= 0
