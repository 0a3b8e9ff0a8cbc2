"""``env=half_cheetah_dir``: HalfCheetah run forward or backward per task (2 tasks) (meta-RL; needs MuJoCo).

The environment itself is :class:`corral.meta.half_cheetah_tasks.HalfCheetahDirEnv` (gymnasium's
HalfCheetah-v5 with a task reward); 200 steps per episode, as in PEARL. Install MuJoCo with
``pip install 'corral[mujoco]'``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral import hookimpl
from corral.framework.env import EnvFactory
from corral.meta.task_envs import TaskEnvConfig, require_mujoco, task_env_factory

#: Steps per episode unless env.max_episode_length says otherwise.
EPISODE_LENGTH = 200


@dataclass
class HalfCheetahDirEnvConfig(TaskEnvConfig):
    """HalfCheetah run forward or backward per task (2 tasks)."""


def build_half_cheetah_dir(config: HalfCheetahDirEnvConfig) -> EnvFactory:
    """A picklable factory (a ConfigError naming the extra to install when MuJoCo is missing)."""
    require_mujoco("half_cheetah_dir")
    return task_env_factory("corral.meta.half_cheetah_tasks:HalfCheetahDirEnv", config, EPISODE_LENGTH)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=half_cheetah_dir``."""
    register("env", "half_cheetah_dir", build_half_cheetah_dir, config=HalfCheetahDirEnvConfig,
             help="HalfCheetah run forward or backward per task (2 tasks) (meta-RL, MuJoCo)")
