"""``env=gym``: any registered gymnasium environment by id (``env=gym env.id=Hopper-v5``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.env import EnvFactory


@dataclass
class GymEnvConfig:
    """A gymnasium environment made with ``gymnasium.make(id, **kwargs)``."""

    id: str = field(default=MISSING, metadata={"help": "gymnasium environment id, e.g. CartPole-v1"})
    max_episode_length: Optional[int] = field(
        default=None, metadata=check(ge=1, help="cut episodes here (default: the environment's own time limit, "
                                                "which this cannot exceed; env.kwargs.max_episode_steps raises that)")
    )
    kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "keyword arguments for gymnasium.make"})


def build_gym_env(config: GymEnvConfig) -> EnvFactory:
    """A picklable factory for the configured environment."""
    return EnvFactory(config.id, dict(config.kwargs))


def preset(kind_name: str, env_id: str, help: str) -> tuple[type, Any]:
    """A config dataclass whose ``id`` defaults to ``env_id``, for preset modules."""

    @dataclass
    class PresetConfig(GymEnvConfig):
        id: str = field(default=env_id, metadata={"help": "gymnasium environment id"})

    PresetConfig.__name__ = PresetConfig.__qualname__ = f"{kind_name.title().replace('_', '')}EnvConfig"
    PresetConfig.__doc__ = help
    return PresetConfig, build_gym_env


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=gym``."""
    register("env", "gym", build_gym_env, config=GymEnvConfig, help="any gymnasium environment by id (env.id=...)")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """An ``env.id`` that gymnasium cannot make (unknown, or its extra is not installed), or an
    ``env.kwargs`` key its environment does not take, fails before anything starts, in the line making
    it would end in; for ``env=gym`` and every preset built on it."""
    from corral.framework.plugins import get_registry

    env = cfg.get("env") if hasattr(cfg, "get") else None
    if env is None or "name" not in env or get_registry().get("env", env.name).factory is not build_gym_env:
        return
    if isinstance(env.get("id"), str):
        EnvFactory(env.id, dict(env.get("kwargs") or {})).check()
