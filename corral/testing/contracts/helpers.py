"""Helpers the contract suites share: the default environments, a seeded test policy, perturbed
parameters, env specs, close-tracking environments and the leak-check baseline."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import gymnasium as gym
import numpy as np

from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory, EnvSpec, make_env
from corral.framework.policy import Policy

#: gymnasium id of the environment every suite samples by default.
DEFAULT_ENV_ID = "CartPole-v1"
#: An environment whose ``step`` raises ``EnvironmentFailure`` (see :mod:`corral.testing.faulty_envs`).
RAISING_ENV_ID = "corral.testing.faulty_envs:corral/RaisingCartPole-v1"


def make_test_policy(env_spec: EnvSpec, seed: int = 0, hidden_sizes: Sequence[int] = (32, 32)) -> Policy:
    """A small :class:`~corral.plugins.policies.mlp.MLPPolicy` whose weights depend only on ``seed``.

    torch's global RNG is left as it was.
    """
    import torch

    from corral.plugins.policies.mlp import MLPPolicy

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLPPolicy(env_spec, hidden_sizes=tuple(hidden_sizes))


def perturbed(params: Mapping[str, np.ndarray], scale: float = 0.5, seed: int = 12345) -> dict[str, np.ndarray]:
    """``params`` plus Gaussian noise on every float array: a policy that acts visibly differently."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in params.items():
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            arr = (arr + rng.normal(0.0, scale, size=arr.shape)).astype(arr.dtype)
        out[key] = arr.copy()
    return out


def env_spec_of(env: Any, max_episode_length: int | None = None) -> EnvSpec:
    """The EnvSpec of an environment source (id, EnvFactory, env), probing one instance."""
    probe = make_env(EnvFactory(env) if isinstance(env, str) else env)
    try:
        return EnvSpec.from_env(probe, max_episode_length)
    finally:
        probe.close()


def acts_differently(a: EpisodeBatch, b: EpisodeBatch) -> bool:
    """True when two batches sampled from the same start differ in actions or agent infos."""
    diffs = a.differences(b)
    return any(d == "actions" or d.startswith("agent_infos") or d == "lengths" for d in diffs)


class _CloseTracker(gym.Wrapper):
    """Wraps an environment and remembers whether ``close()`` reached it."""

    instances: ClassVar["weakref.WeakSet[_CloseTracker]"] = weakref.WeakSet()

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.closed = False
        _CloseTracker.instances.add(self)

    def close(self) -> None:
        """Close the environment and record it."""
        self.closed = True
        super().close()


def tracked_env(env_id: str = DEFAULT_ENV_ID, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` wrapped so a test can see that it was closed."""
    return tracked(EnvFactory(env_id, kwargs))


def tracked(source: Any) -> gym.Env:
    """A fresh environment from ``source`` (an id, :class:`EnvFactory`, env or callable) wrapped so
    a test can see that it was closed. ``EnvFactory(tracked, {"source": ...})`` makes such envs."""
    return _CloseTracker(make_env(EnvFactory(source) if isinstance(source, str) else source))


# ------------------------------------------------------------------------------------ process checks
def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, so it is not mistaken for a leaked child."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except Exception:  # noqa: BLE001 - platforms without it have nothing to mistake
        pass


@dataclass
class _Baseline:
    children: set[int]
    shm: set[str]
    seen_pids: set[int] = field(default_factory=set)
