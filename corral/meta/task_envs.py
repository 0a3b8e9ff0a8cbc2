"""What the meta-RL environment options share: their common config fields and a picklable maker."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from corral.framework.checks import check
from corral.framework.env import EnvFactory, before_making


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
            **kwargs,
        },
    )


__all__ = ["TaskEnvConfig", "make_task_env", "require_mujoco", "task_env_factory"]
