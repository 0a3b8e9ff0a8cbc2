"""What trial-running workers (``worker=rl2``, ``worker=pearl``) share: a task per trial from a schedule.

A :class:`~corral.meta.tasks.TaskSchedule` env update gives trial ``k`` of the worker the
schedule's ``k``-th task (and its known context, when the schedule has one); any other env update
(a new env, a :class:`~corral.meta.tasks.SetTask`) is applied as usual and every trial runs on the
environment's current task. The schedule and how many of its trials have started go into the
worker's snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from corral.framework.env import current_task_id
from corral.meta.tasks import TaskSchedule


class TrialTasksMixin:
    """Mixed into a :class:`~corral.framework.worker.Worker` (before it in the bases)."""

    schedule: TaskSchedule | None = None
    #: Trials started under the current schedule.
    trials_started: int = 0

    def update_env(self, env_update: Any) -> None:
        """As :meth:`Worker.update_env`; a :class:`TaskSchedule` also becomes the trials' task schedule."""
        super().update_env(env_update)  # type: ignore[misc]
        if isinstance(env_update, TaskSchedule):
            self.schedule = env_update
            self.trials_started = 0
        elif env_update is not None:
            self.schedule = None

    def next_trial_task(self, env: gym.Env) -> int:
        """Set the next trial's task on ``env`` (when there is a schedule); return its task id."""
        if self.schedule is not None:
            self.schedule.apply(env, self.trials_started)
        self.trials_started += 1
        return current_task_id(env)

    def last_trial_context(self) -> Any:
        """What the schedule knows about the task of the trial :meth:`next_trial_task` last started
        (None without a schedule or a known context)."""
        return None if self.schedule is None else self.schedule.context(self.trials_started - 1)

    def state_dict(self) -> dict[str, Any]:
        """The worker's state plus the task schedule and how many of its trials have started."""
        state = super().state_dict()  # type: ignore[misc]
        state["schedule"] = self.schedule
        state["trials_started"] = self.trials_started
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)  # type: ignore[misc]
        self.schedule = state.get("schedule")
        self.trials_started = int(state.get("trials_started", 0))


__all__ = ["TrialTasksMixin"]
