"""What the meta-RL environment options share: their common config fields, a picklable maker and
the run's task.

The run's task: an algorithm that sets no tasks (``algo=ppo env=point_nav``) runs single-task RL on
one task of the family, ``sample_tasks(1, rng)[0]`` with ``rng`` seeded by ``env.task_seed``
(:func:`run_task`). Every environment of the run draws the same one at its first reset, whatever its
worker, slot or seed branch, so the run's sampling, the trainer's evaluation and ``corral eval``
all run that task. Meta-RL algorithms (``algo=rl2_ppo``, ``algo=pearl``) set a task for every
trial instead, and trial-running workers without a task schedule draw a new task per trial
(:mod:`corral.meta.trial_tasks`), so ``env.task_seed`` does not apply to them: its ``applies_if``
names every worker whose class has ``sets_tasks = True`` (``worker=rl2``, ``worker=pearl``, a plugin's
trial worker), and given with one of them a warning says it has no effect.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from corral.framework.checks import OptionsWith, check
from corral.framework.env import EnvFactory, before_making

#: The workers that run trials (:mod:`corral.meta.trial_tasks`), those whose class has ``sets_tasks = True``:
#: their tasks come from the algorithm's schedules, or a new one per trial, never the run's one task, so
#: ``env.task_seed`` has no effect there.
TRIAL_WORKERS = OptionsWith("sets_tasks", "the workers that run trials")


@dataclass
class TaskEnvConfig:
    """Fields every meta-RL environment option has."""

    max_episode_length: int | None = field(
        default=None, metadata=check(ge=1, help="steps per episode (default: the environment's own episode length)")
    )
    rl2_inputs: bool = field(
        default=False,
        metadata={"help": "wrap in the RL2 wrapper (observation + previous action, reward, done); "
                          "worker=rl2 needs it (the rl2_* presets set it)"},
    )
    task_seed: int = field(
        default=0,
        metadata=check(ge=0, applies_if=("worker.name", "not in", TRIAL_WORKERS),
                       ignored_because="a trial-running worker runs the algorithm's scheduled tasks, or a new task "
                                       "each trial, never the run's one task (algo.task_seed seeds the meta-RL task "
                                       "split)",
                       help="seed of the run's one task for an algorithm that sets no tasks (algo=ppo ...): "
                            "every environment of the run, its evaluation and corral eval run it; "
                            "trial-running workers (worker=rl2, worker=pearl) ignore it"),
    )

    #: The option's own field that sets the episode length (bandits' ``n_pulls``), if it has one. It
    #: defaults to None, so a config tells it given from not: not given, ``env.max_episode_length``
    #: sets the length; given, an ``env.max_episode_length`` that differs from it is a ConfigError
    #: naming both (checked before anything is built), rather than one of the two being silently dropped.
    episode_length_field: ClassVar[str | None] = None
    #: What that field sets, for the message (``"a bandit episode's length"``).
    episode_length_what: ClassVar[str] = "the episode length"

    def __post_init__(self) -> None:
        own = self.episode_length_field
        if own is None or self.max_episode_length is None:
            return
        value = getattr(self, own)
        if value is not None and int(value) != int(self.max_episode_length):
            from corral.framework.errors import ConfigError

            raise ConfigError(
                f"env.{own}={value} and env.max_episode_length={self.max_episode_length} disagree: env.{own} sets "
                f"{self.episode_length_what}; drop env.max_episode_length (or give it the same value)"
            )


def make_task_env(entry_point: str, max_episode_steps: int, rl2_inputs: bool = False, **kwargs: Any) -> gym.Env:
    """Make ``entry_point`` (``"module:Class"``) with gymnasium's ``TimeLimit`` of ``max_episode_steps``,
    wrapped in :class:`~corral.meta.rl2_env.RL2Env` when ``rl2_inputs``. Module-level, so an
    :class:`EnvFactory` of it pickles by reference to worker processes."""
    module, _, name = entry_point.partition(":")
    env_id = f"corral/{name}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point)
    importlib.import_module(module)
    before_making(env_id)  # MuJoCo's warnings to corral's log, for the MuJoCo tasks
    env = gym.make(env_id, max_episode_steps=int(max_episode_steps), disable_env_checker=True, **kwargs)
    if rl2_inputs:
        from corral.meta.rl2_env import RL2Env

        env = RL2Env(env)
    return env


def task_generator(task_seed: int) -> np.random.Generator:
    """The generator the run's task is drawn with: the same for every environment given ``task_seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(task_seed))))


def run_task(env: Any, task_seed: int) -> Any:
    """The run's task on ``env`` (an environment with ``sample_tasks(n, rng)``): the first task its
    distribution gives with ``task_seed``'s generator. An environment draws it at its first reset
    when no task was set (see the module docstring)."""
    return env.sample_tasks(1, task_generator(task_seed))[0]


def require_mujoco(option: str) -> None:
    """Raise a ConfigError naming the extra to install when MuJoCo is missing."""
    import importlib.util

    from corral.framework.errors import ConfigError

    if importlib.util.find_spec("mujoco") is None:
        raise ConfigError(
            f"env={option} needs MuJoCo, which is not installed; install the extra with "
            "pip install 'corral[mujoco]' (or pip install 'gymnasium[mujoco]')"
        )


def task_env_factory(entry_point: str, config: TaskEnvConfig, default_length: int, **kwargs: Any) -> EnvFactory:
    """The :class:`EnvFactory` an environment option's builder returns."""
    return EnvFactory(
        make_task_env,
        {
            "entry_point": entry_point,
            "max_episode_steps": int(config.max_episode_length or default_length),
            "rl2_inputs": bool(config.rl2_inputs),
            "task_seed": int(config.task_seed),
            **kwargs,
        },
    )


__all__ = ["TRIAL_WORKERS", "TaskEnvConfig", "make_task_env", "require_mujoco", "run_task", "task_env_factory", "task_generator"]
