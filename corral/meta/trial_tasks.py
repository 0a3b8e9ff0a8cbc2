"""What trial-running workers (``worker=rl2``, ``worker=pearl``) share: a task per trial.

Where trial ``k`` of a worker gets its task:

- a :class:`~corral.meta.tasks.TaskSchedule` env update (how ``algo=rl2_ppo`` and ``algo=pearl``
  sample, and how their meta-evaluation runs the held-out tasks): the schedule's ``k``-th task (and
  its known context, when the schedule has one);
- no schedule, with the run's environment as it was made (the trainer's plain evaluation episodes,
  ``eval/*``; ``corral eval`` of an RL2 or PEARL run runs the run's meta-test schedule instead,
  :class:`~corral.framework.evaluation.TrialEvaluation`): a **new task for every trial**, drawn from the environment's task distribution
  with the slot's own stream (child :data:`TASK_STREAM` of the slot's seed, beside the
  environment's reset seed, child 0, and the agent's noise, child 1). They are not taken from the
  run's task split, and evaluation workers, on a seed branch of their own, draw other tasks than
  a training worker would; so evaluating more trials means more tasks, not the same trials again;
- another env update that sets the task itself (a :class:`~corral.meta.tasks.SetTask`, any other
  callable): every trial runs on the environment's current task.

The schedule, how many of its trials have started and the task streams go into the worker's snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from corral.framework.env import child_seed, current_task_id, is_new_env, set_env_task, supports_tasks, task_env
from corral.meta.tasks import TaskSchedule

#: Child of a slot's seed that its tasks come from when no schedule sets them.
TASK_STREAM = 2


class TrialTasksMixin:
    """Mixed into a :class:`~corral.framework.worker.Worker` (before it in the bases)."""

    #: Its trials set the environments' tasks (:attr:`corral.framework.worker.Worker.sets_tasks`).
    sets_tasks: ClassVar[bool] = True
    schedule: TaskSchedule | None = None
    #: Trials started under the current schedule.
    trials_started: int = 0
    #: True after an env update that set the environments' task itself (a SetTask): trials keep it.
    keeps_env_task: bool = False
    #: What the trials run on without a schedule, in words (``corral eval`` prints it for a run whose
    #: algorithm plans no held-out evaluation of its own).
    tasks_without_schedule: ClassVar[str] = (
        "a new task for every trial, drawn from the environment's task distribution with the evaluation seed "
        "(not the run's meta-train or held-out task lists)"
    )

    def update_env(self, env_update: Any) -> None:
        """As :meth:`Worker.update_env`; a :class:`TaskSchedule` also becomes the trials' task schedule."""
        super().update_env(env_update)  # type: ignore[misc]
        if isinstance(env_update, TaskSchedule):
            self.schedule = env_update
            self.trials_started = 0
            self.keeps_env_task = False
        elif env_update is not None:
            self.schedule = None
            self.keeps_env_task = not is_new_env(env_update)

    def _task_generator(self, slot: int) -> np.random.Generator:
        """Slot ``slot``'s generator of tasks drawn without a schedule (made on first use)."""
        generators: dict[int, np.random.Generator] = self.__dict__.setdefault("_task_generators", {})
        if slot not in generators:
            seeds = self.env_seeds  # type: ignore[attr-defined]
            generators[slot] = np.random.Generator(np.random.PCG64(child_seed(seeds[slot], TASK_STREAM)))
        return generators[slot]

    def next_trial_task(self, env: gym.Env, slot: int | None = None) -> int:
        """Set the next trial's task on ``env`` (slot ``slot``'s environment; None: found by identity):
        the schedule's, else a new one drawn from the slot's stream, unless an env update set the task.
        Return its task id (-1 for a drawn task)."""
        if self.schedule is not None:
            self.schedule.apply(env, self.trials_started)
        elif not self.keeps_env_task and supports_tasks(env):
            if slot is None:
                slot = next(j for j, e in enumerate(self.envs) if e is env)  # type: ignore[attr-defined]
            set_env_task(env, task_env(env).sample_tasks(1, self._task_generator(slot))[0])
        self.trials_started += 1
        return current_task_id(env)

    def last_trial_context(self) -> Any:
        """What the schedule knows about the task of the trial :meth:`next_trial_task` last started
        (None without a schedule or a known context)."""
        return None if self.schedule is None else self.schedule.context(self.trials_started - 1)

    def state_dict(self) -> dict[str, Any]:
        """The worker's state plus the task schedule, how many of its trials have started and the task streams."""
        state = super().state_dict()  # type: ignore[misc]
        state["schedule"] = self.schedule
        state["trials_started"] = self.trials_started
        state["keeps_env_task"] = self.keeps_env_task
        generators = self.__dict__.get("_task_generators", {})
        state["task_streams"] = {j: g.bit_generator.state for j, g in generators.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)  # type: ignore[misc]
        self.schedule = state.get("schedule")
        self.trials_started = int(state.get("trials_started", 0))
        self.keeps_env_task = bool(state.get("keeps_env_task", False))
        self.__dict__["_task_generators"] = {}
        for j, generator_state in dict(state.get("task_streams", {})).items():
            self._task_generator(int(j)).bit_generator.state = generator_state


__all__ = ["TASK_STREAM", "TrialTasksMixin"]
