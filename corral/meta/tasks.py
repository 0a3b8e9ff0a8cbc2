"""Meta-RL tasks: seeded, disjoint meta-train / meta-test splits and the env updates that set tasks.

A task environment (:class:`~corral.framework.env.TaskEnv`) draws tasks with ``sample_tasks(n, rng)``
and runs one with ``set_task(task)``. Here:

- :class:`TaskSplit` is a small picklable recipe: ``n_train + n_test`` tasks drawn once with a
  seeded generator from the environment's distribution, the first ``n_train`` for meta-training
  (ids ``0 .. n_train-1``), the rest held out for meta-testing (ids ``n_train ..``). No held-out
  task equals a training task (checked). Every process resolves the same split from its own
  environment, so only indices travel to workers.
- :class:`TaskSchedule` is an ``env_update``: a callable applied to each environment (it sets the
  first scheduled task). A worker that runs trials (``worker=rl2``) takes trial ``k``'s task from
  ``schedule.task(env, k)``; any other worker simply keeps the first task.
- :class:`TaskSampler` turns a split into one schedule per worker for an epoch (a list of
  ``n_workers`` env updates, which samplers spread one per worker), drawn from its own seeded
  generator so the tasks do not depend on the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from corral.framework.env import child_seed, set_env_task, task_env
from corral.framework.errors import ConfigError
from corral.framework.snapshot import register_snapshot_dataclass

SPLITS = ("train", "test")


@register_snapshot_dataclass  # stored in snapshots as data (corral.framework.snapshot)
@dataclass(frozen=True)
class Task:
    """One task: its id (unique within a split, see :class:`TaskSplit`) and its description."""

    id: int
    params: Any


def _task_key(params: Any) -> str:
    """A comparable rendering of a task description (arrays by value)."""
    if isinstance(params, dict):
        return "{" + ",".join(f"{k}:{_task_key(v)}" for k, v in sorted(params.items())) + "}"
    if isinstance(params, (list, tuple, np.ndarray)):
        return "[" + ",".join(_task_key(v) for v in np.asarray(params, dtype=object).ravel().tolist()) + "]"
    return repr(params)


@register_snapshot_dataclass  # stored in snapshots as data (corral.framework.snapshot)
@dataclass(frozen=True)
class TaskSplit:
    """``n_train`` meta-train and ``n_test`` held-out meta-test tasks drawn with ``seed``.

    ``tasks(env, "train")`` / ``tasks(env, "test")`` resolve them on an environment (cached on it).
    """

    n_train: int = 100
    n_test: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_train < 1 or self.n_test < 0:
            raise ConfigError(
                f"a task split needs n_train >= 1 and n_test >= 0 tasks, got n_train={self.n_train}, "
                f"n_test={self.n_test}; set algo.n_train_tasks / algo.n_test_tasks"
            )

    def n(self, split: str) -> int:
        """Number of tasks in ``split`` (``n_test=0`` evaluates on the meta-train tasks)."""
        _check_split(split)
        return self.n_train if split == "train" or self.n_test == 0 else self.n_test

    def task_id(self, split: str, index: int) -> int:
        """Id of task ``index`` of ``split`` (meta-test ids follow the meta-train ids)."""
        return int(index) + (0 if split == "train" else self.n_train)

    def all_tasks(self, env: gym.Env) -> dict[str, list[Task]]:
        """Both splits, drawn on ``env``'s task distribution (the same on every process)."""
        base = task_env(env)
        cache = base.__dict__.setdefault("_corral_task_splits", {})
        if self in cache:
            return cache[self]
        rng = np.random.Generator(np.random.PCG64(child_seed(np.random.SeedSequence(self.seed), 7)))
        params = list(base.sample_tasks(self.n_train + self.n_test, rng))
        if len(params) != self.n_train + self.n_test:
            raise ConfigError(f"{type(base).__name__}.sample_tasks({self.n_train + self.n_test}) returned {len(params)} tasks")
        train = [Task(i, p) for i, p in enumerate(params[: self.n_train])]
        test = [Task(self.n_train + i, p) for i, p in enumerate(params[self.n_train :])]
        train_keys = {_task_key(t.params) for t in train}
        overlap = [t.id for t in test if _task_key(t.params) in train_keys]
        if overlap:
            raise ConfigError(
                f"{len(overlap)} meta-test task(s) of {type(base).__name__} equal meta-train tasks (the task "
                "distribution is too small for disjoint splits); lower algo.n_train_tasks / algo.n_test_tasks, or set "
                "algo.n_test_tasks=0 to meta-test on the meta-train tasks (finite task sets such as half_cheetah_dir)"
            )
        cache[self] = {"train": train, "test": test}
        return cache[self]

    def tasks(self, env: gym.Env, split: str) -> list[Task]:
        """The tasks of ``split`` (``"train"`` or ``"test"``) on ``env``. With ``n_test=0`` (finite
        task sets such as HalfCheetahDir's two directions) the meta-test tasks are the meta-train ones."""
        _check_split(split)
        if split == "test" and self.n_test == 0:
            split = "train"
        return self.all_tasks(env)[split]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"task split must be one of {SPLITS}, got {split!r}")


@register_snapshot_dataclass  # stored in snapshots as data (corral.framework.snapshot)
@dataclass(frozen=True)
class SetTask:
    """An ``env_update`` that sets one explicit task (``task_id`` is recorded in episode infos)."""

    task: Any
    task_id: int = -1

    def __call__(self, env: gym.Env) -> None:
        """Set the task on ``env``."""
        set_env_task(env, self.task, self.task_id)


@register_snapshot_dataclass  # stored in snapshots as data (corral.framework.snapshot)
@dataclass(frozen=True)
class TaskSchedule:
    """An ``env_update`` holding the tasks of successive trials: tasks ``indices`` of ``split``.

    Applied to an environment it sets the first task; a trial-running worker asks
    :meth:`task` for trial ``k``'s task (the schedule repeats when trials outnumber it).

    ``contexts`` (optional, one entry per index): what is already known about each task, as
    transitions ``{"observations", "actions", "rewards"}`` (or None), which a trial-running worker
    hands its agent at the trial's start (:meth:`context`); PEARL's data collection uses it.
    """

    split: TaskSplit
    indices: tuple[int, ...]
    which: str = "train"
    contexts: Optional[tuple[Any, ...]] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_split(self.which)
        if not self.indices:
            raise ValueError("a task schedule needs at least one task")
        if self.contexts is not None and len(self.contexts) != len(self.indices):
            raise ValueError(f"a task schedule of {len(self.indices)} tasks got {len(self.contexts)} contexts")

    def context(self, k: int) -> Any:
        """The known context of trial ``k``'s task (None when there is none)."""
        return None if self.contexts is None else self.contexts[k % len(self.indices)]

    def __len__(self) -> int:
        return len(self.indices)

    def task(self, env: gym.Env, k: int) -> Task:
        """Trial ``k``'s task, resolved on ``env``."""
        return self.split.tasks(env, self.which)[self.indices[k % len(self.indices)]]

    def apply(self, env: gym.Env, k: int) -> Task:
        """Set trial ``k``'s task on ``env``; return it."""
        task = self.task(env, k)
        set_env_task(env, task.params, task.id)
        return task

    def __call__(self, env: gym.Env) -> None:
        """Set the first scheduled task on ``env``."""
        self.apply(env, 0)


@dataclass
class TaskSampler:
    """Draws meta-train tasks for each epoch: one :class:`TaskSchedule` per worker.

    The draws come from a generator seeded with ``seed`` and the epoch number, so the tasks of
    epoch ``itr`` are a pure function of (split, seed, itr): resumed runs and every sampler see
    the same tasks.
    """

    split: TaskSplit
    seed: int = 0
    which: str = "train"

    def schedules(self, itr: int, n_workers: int, tasks_per_worker: int) -> list[TaskSchedule]:
        """``n_workers`` schedules of ``tasks_per_worker`` tasks each (drawn with replacement)."""
        if n_workers < 1 or tasks_per_worker < 1:
            raise ValueError(f"need n_workers >= 1 and tasks_per_worker >= 1, got {n_workers}, {tasks_per_worker}")
        rng = np.random.Generator(np.random.PCG64(child_seed(np.random.SeedSequence(self.seed), 11, int(itr))))
        n = self.split.n(self.which)
        draws = rng.integers(0, n, size=(n_workers, tasks_per_worker))
        return [TaskSchedule(self.split, tuple(int(i) for i in row), self.which) for row in draws]

    def env_updates(self, itr: int, n_workers: int, tasks_per_worker: int = 1) -> list[TaskSchedule]:
        """The env updates of epoch ``itr``: a list of ``n_workers`` items, spread one per worker."""
        return self.schedules(itr, n_workers, tasks_per_worker)


def schedule_length(batch_size: int, n_workers: int, trial_steps: int, n_envs: int = 1) -> int:
    """Tasks each worker's schedule needs for an epoch of ``batch_size`` steps when every trial runs
    ``trial_steps`` steps (trials cut short by early ends take the schedule round again), plus one
    per environment slot for the trials the slots start together."""
    return math.ceil(batch_size / max(1, n_workers) / max(1, trial_steps)) + max(1, n_envs)


def spread(updates: Sequence[Any], n_workers: int) -> list[Any]:
    """``updates`` as a list of exactly ``n_workers`` items (cycled), the form samplers spread."""
    if not updates:
        raise ValueError("no updates to spread")
    return [updates[i % len(updates)] for i in range(n_workers)]


__all__ = [
    "SPLITS", "SetTask", "Task", "TaskSampler", "TaskSchedule", "TaskSplit", "schedule_length", "spread",
]
