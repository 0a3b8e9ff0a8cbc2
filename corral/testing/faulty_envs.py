"""Environments that fail on purpose, for testing how samplers handle faults.

They are importable (worker processes and Ray actors must be able to unpickle them) and are
registered with gymnasium on import:

- ``corral/RaisingCartPole-v1``: raises ``EnvironmentFailure`` in ``step`` number ``fail_at``.
- ``corral/SuicideCartPole-v1``: SIGKILLs its own process in ``step`` number ``fail_at``.
- ``corral/ExitingCartPole-v1``: calls ``sys.exit(code)`` in ``step`` number ``fail_at``.
- ``corral/LingeringCartPole-v1``: in ``step`` number ``fail_at``, closes its process's files (pipes)
  and exits ``linger_s`` seconds later (a process's pipes break before its end is reported).
- ``corral/HangingCartPole-v1``: sleeps ``hang_s`` seconds in ``step`` number ``fail_at``.
- ``corral/SwallowingCartPole-v1``: from ``step`` number ``fail_at`` on, sleeps ``hang_s`` seconds
  per step inside an ``except KeyboardInterrupt: pass`` (code that swallows a Ctrl-C).
- ``corral/NaNCartPole-v1``: returns NaN observations from ``step`` number ``fail_at`` on.
- ``corral/WrongShapeCartPole-v1``: from ``step`` number ``fail_at`` on, returns observations that do
  not fit its ``observation_space`` (``Box(4,)``): ``extra`` more elements (default 1: shape ``(5,)``),
  or the observation reshaped to ``shape`` (``[2, 2]``), or cast to ``dtype`` (``"U8"``: strings).
- ``corral/HugeRewardCartPole-v1``: rewards times ``scale`` (1e37, finite in float32) from ``step``
  number ``fail_at`` on: an update on them diverges (its returns overflow to infinity).

``fail_at`` counts steps over the environment's life (all episodes). ``only_worker`` limits the
fault to the worker with that number and ``first_life_only`` (default true) to a worker that was
not restarted; both read the ``CORRAL_WORKER_NUMBER`` / ``CORRAL_WORKER_RESTART`` variables that
process-based samplers set in their workers.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class EnvironmentFailure(RuntimeError):
    """Raised by RaisingCartPole."""


class _FaultyCartPole(CartPoleEnv):
    def __init__(self, fail_at: int = 50, only_worker: int | None = None, first_life_only: bool = True,
                 work: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_life_only = first_life_only
        self.fail_at = int(fail_at)
        self.only_worker = only_worker
        self.work = int(work)
        self.steps = 0
        self.worker_number: int | None = None

    def step(self, action: Any) -> Any:
        self.steps += 1
        x = 1
        for _ in range(self.work):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if self.steps == self.fail_at and self._armed():
            self.fail()
        return super().step(action)

    def _armed(self) -> bool:
        if self.first_life_only and os.environ.get("CORRAL_WORKER_RESTART", "0") != "0":
            return False
        target = self.only_worker
        return target is None or os.environ.get("CORRAL_WORKER_NUMBER") == str(target)

    def fail(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class RaisingCartPole(_FaultyCartPole):
    """CartPole whose ``step`` raises at step ``fail_at``."""

    def fail(self) -> None:
        """Raise EnvironmentFailure."""
        raise EnvironmentFailure(f"RaisingCartPole failed on purpose at step {self.steps}")


class SuicideCartPole(_FaultyCartPole):
    """CartPole that kills its own process with SIGKILL at step ``fail_at``."""

    def fail(self) -> None:
        """SIGKILL this process."""
        os.kill(os.getpid(), signal.SIGKILL)


class LingeringCartPole(_FaultyCartPole):
    """CartPole whose process, at step ``fail_at``, closes its files (its pipes) and ends ``linger_s``
    seconds later: the order of any process that exits, slowed down (its pipes break an instant before
    the system reports that it ended)."""

    def __init__(self, linger_s: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.linger_s = float(linger_s)

    def fail(self) -> None:
        """Close every file descriptor above stderr, sleep ``linger_s``, exit with code 1."""
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        time.sleep(self.linger_s)
        os._exit(1)


class ExitingCartPole(_FaultyCartPole):
    """CartPole that calls ``sys.exit(code)`` at step ``fail_at`` (a library that ends the program)."""

    def __init__(self, code: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.code = int(code)

    def fail(self) -> None:
        """Raise SystemExit(code)."""
        sys.exit(self.code)


class NaNCartPole(_FaultyCartPole):
    """CartPole whose observations are NaN from step ``fail_at`` on (a simulator whose state blew up)."""

    def fail(self) -> None:
        """Nothing here: :meth:`step` returns NaN observations from this step on."""

    def step(self, action: Any) -> Any:
        """CartPole's step; its observation is NaN once ``fail_at`` steps were taken (while armed)."""
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.fail_at and self._armed():
            obs = obs * float("nan")
        return obs, reward, terminated, truncated, info


class WrongShapeCartPole(_FaultyCartPole):
    """CartPole whose observations do not fit its ``observation_space`` from step ``fail_at`` on (a wrapper
    that adds a feature but not to the space): ``extra`` zeros appended, or, given ``shape``, the
    observation reshaped to it; given ``dtype``, cast to it (``"U8"``: an array of strings)."""

    def __init__(self, extra: int = 1, shape: Any = None, dtype: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.extra = int(extra)
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self.dtype = dtype

    def fail(self) -> None:
        """Nothing here: :meth:`step` returns observations of the wrong shape from this step on."""

    def step(self, action: Any) -> Any:
        """CartPole's step; its observation does not fit the space once ``fail_at`` steps were taken (while armed)."""
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.fail_at and self._armed():
            if self.shape is not None:
                obs = obs.reshape(self.shape)
            elif self.extra:
                obs = np.concatenate([obs, np.zeros(self.extra, dtype=obs.dtype)])
            if self.dtype is not None:
                obs = obs.astype(self.dtype)
        return obs, reward, terminated, truncated, info


class HugeRewardCartPole(_FaultyCartPole):
    """CartPole whose rewards are times ``scale`` from step ``fail_at`` on: finite, and too large to learn from."""

    def __init__(self, scale: float = 1e37, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale = scale

    def fail(self) -> None:
        """Nothing here: :meth:`step` returns huge rewards from this step on."""

    def step(self, action: Any) -> Any:
        """CartPole's step; its reward is times ``scale`` once ``fail_at`` steps were taken (while armed)."""
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.fail_at and self._armed():
            reward = float(reward) * self.scale
        return obs, reward, terminated, truncated, info


class HangingCartPole(_FaultyCartPole):
    """CartPole whose ``step`` sleeps ``hang_s`` seconds at step ``fail_at``."""

    def __init__(self, hang_s: float = 3600.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang_s = hang_s

    def fail(self) -> None:
        """Sleep (a stuck simulator)."""
        time.sleep(self.hang_s)


class SwallowingCartPole(_FaultyCartPole):
    """CartPole whose every step from ``fail_at`` on sleeps ``hang_s`` seconds inside a block that
    swallows KeyboardInterrupt, as a simulator binding or a bare ``except:`` may: a Ctrl-C that
    arrives then never reaches the code above the environment."""

    def __init__(self, hang_s: float = 0.02, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang_s = hang_s

    def fail(self) -> None:
        """Nothing here: :meth:`step` sleeps from this step on."""

    def step(self, action: Any) -> Any:
        """CartPole's step, after ``hang_s`` seconds that swallow KeyboardInterrupt (once ``fail_at`` steps were taken)."""
        if self.steps + 1 >= self.fail_at and self._armed():
            try:
                time.sleep(self.hang_s)
            except KeyboardInterrupt:
                pass
        return super().step(action)


for _name, _cls in (("Raising", RaisingCartPole), ("Suicide", SuicideCartPole), ("Exiting", ExitingCartPole),
                    ("Lingering", LingeringCartPole),
                    ("Hanging", HangingCartPole),
                    ("NaN", NaNCartPole), ("WrongShape", WrongShapeCartPole), ("HugeReward", HugeRewardCartPole), ("Swallowing", SwallowingCartPole)):
    _id = f"corral/{_name}CartPole-v1"
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls, max_episode_steps=500)
