"""The entry point of corral-testplugin: written exactly as a third-party author would write it.

``pyproject.toml`` declares ``[project.entry-points.corral] testplugin = "corral_testplugin.plugin"``;
corral imports this module and calls its ``corral_register`` hook.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import gymnasium as gym
import numpy as np

from corral import DefaultWorker, LocalSampler, hookimpl
from corral.framework.env import child_seed


@dataclass
class CountingSamplerConfig:
    """Settings of ``sampler=testlocal``."""

    n_workers: int = field(default=1, metadata={"help": "workers, run one after another in this process"})
    calls_file: Optional[str] = field(
        default=None, metadata={"help": "write the call counts as JSON to this file after every call"}
    )


class CountingLocalSampler(LocalSampler):
    """A local sampler that counts its calls (and optionally writes the counts to a file)."""

    def __init__(self, agents: Any, envs: Any, *, calls_file: Optional[str] = None, **kwargs: Any) -> None:
        self.calls = {"obtain_samples": 0, "obtain_exact_episodes": 0}
        self.calls_file = calls_file
        super().__init__(agents, envs, **kwargs)

    def obtain_samples(self, itr: int, num_samples: int, agent_update: Any, env_update: Any = None) -> Any:
        """Count, then sample like ``sampler=local``."""
        self.calls["obtain_samples"] += 1
        self._write()
        return super().obtain_samples(itr, num_samples, agent_update, env_update)

    def obtain_exact_episodes(self, n_eps_per_worker: int, agent_update: Any, env_update: Any = None) -> Any:
        """Count, then sample like ``sampler=local``."""
        self.calls["obtain_exact_episodes"] += 1
        self._write()
        return super().obtain_exact_episodes(n_eps_per_worker, agent_update, env_update)

    def _write(self) -> None:
        if self.calls_file:
            Path(self.calls_file).write_text(json.dumps(self.calls))


@dataclass
class NoisyWorkerConfig:
    """Settings of ``worker=testworker``."""

    noise_std: float = field(default=0.0, metadata={"help": "std of Gaussian noise added to every observation"})


class _ObservationNoise(gym.ObservationWrapper):
    """Adds N(0, std^2) noise to Box observations, from its own generator."""

    def __init__(self, env: gym.Env, std: float, rng: np.random.Generator) -> None:
        super().__init__(env)
        self.std = std
        self.rng = rng
        self.n_noised = 0

    def observation(self, observation: Any) -> Any:
        """``observation`` plus fresh noise (unchanged when ``std`` is 0)."""
        self.n_noised += 1
        if self.std <= 0:
            return observation
        obs = np.asarray(observation)
        return (obs + self.rng.normal(0.0, self.std, size=obs.shape)).astype(obs.dtype, copy=False)


class NoisyWorker(DefaultWorker):
    """``worker=default`` with Gaussian observation noise; slot j's noise comes from child 2 of its seed."""

    def __init__(self, *, noise_std: float = 0.0, **kwargs: Any) -> None:
        if noise_std < 0:
            raise ValueError(f"worker.noise_std must be >= 0, got {noise_std}")
        self.noise_std = float(noise_std)
        super().__init__(**kwargs)

    def _on_new_envs(self) -> None:
        self.envs = [
            env if isinstance(env, _ObservationNoise)
            else _ObservationNoise(env, self.noise_std, np.random.default_rng(child_seed(self.env_seeds[j], 2)))
            for j, env in enumerate(self.envs)
        ]
        super()._on_new_envs()

    def state_dict(self) -> dict[str, Any]:
        """The default worker's state plus the noise generators."""
        state = super().state_dict()
        state["obs_noise"] = [e.rng.bit_generator.state for e in self.envs if isinstance(e, _ObservationNoise)]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        for env, rng_state in zip(self.envs, state.get("obs_noise", [])):
            env.rng.bit_generator.state = rng_state


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=testlocal`` and ``worker=testworker``."""
    register("sampler", "testlocal", CountingLocalSampler, config=CountingSamplerConfig,
             help="sampler=local that counts its calls")
    register("worker", "testworker", NoisyWorker, config=NoisyWorkerConfig,
             help="worker=default with Gaussian observation noise")


@hookimpl
def corral_config_searchpath() -> list[str]:
    """This plugin's experiment presets (``experiment=testplugin_quick``), then the entries that
    CORRAL_TESTPLUGIN_SEARCHPATH lists (comma-separated): a test's plugin bug, a path naming nothing."""
    extra = [p.strip() for p in os.environ.get("CORRAL_TESTPLUGIN_SEARCHPATH", "").split(",") if p.strip()]
    return ["pkg://corral_testplugin.conf", *extra]


def _raise_if_asked(hook: str) -> None:
    """A plugin bug on demand: raise in ``hook`` when CORRAL_TESTPLUGIN_RAISE_IN names it."""
    if os.environ.get("CORRAL_TESTPLUGIN_RAISE_IN") == hook:
        raise ValueError(f"testplugin's {hook} failed on purpose")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Nothing to check (it raises only when a test asks)."""
    _raise_if_asked("corral_validate_config")


@hookimpl
def corral_run_start(trainer: Any, cfg: Any) -> None:
    """Nothing to do (it raises only when a test asks)."""
    _raise_if_asked("corral_run_start")
