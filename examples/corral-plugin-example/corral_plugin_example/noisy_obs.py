"""``worker=noisy_obs``: corral's vectorised worker, with Gaussian noise added to every observation.

Observation noise is a common robustness test (a sensor that is not exact). The noise is part of
what the *worker* sees, so it belongs in a worker, not in the environment preset.

Reproducibility rules every corral worker follows, and how this one keeps them:

- **No global RNG.** Each environment slot ``j`` draws its noise from its own generator, seeded
  from the slot's seed stream: ``child_seed(self.env_seeds[j], NOISE_STREAM)``. Children 0 and 1
  of a slot's stream are taken by corral (environment seeding and action noise); this worker uses
  child 2. So the same seed gives the same noisy episodes in any sampler, in any process.
- **State for snapshots.** ``state_dict()`` adds the generators' states, so a resumed run
  continues the same noise sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from corral import VecWorker, check
from corral.framework.env import child_seed
from corral.framework.errors import ConfigError

#: The child of each environment slot's seed stream that feeds its observation noise.
NOISE_STREAM = 2


@dataclass
class NoisyObsConfig:
    """Settings of ``worker=noisy_obs`` (every field can be overridden: ``worker.noise_std=0.1``)."""

    noise_std: float = field(default=0.05, metadata=check(ge=0, help="standard deviation of the Gaussian observation noise"))
    n_envs: int = field(default=4, metadata=check(ge=1, help="environments stepped together by one worker"))


class ObservationNoise(gym.ObservationWrapper):
    """Adds ``N(0, std^2)`` noise to each observation (reset and step), drawn from ``rng``."""

    def __init__(self, env: gym.Env, std: float, rng: np.random.Generator) -> None:
        if not isinstance(env.observation_space, gym.spaces.Box):
            raise ConfigError(
                f"worker=noisy_obs needs a Box observation space, got {env.observation_space}; "
                "choose worker=vec for this environment"
            )
        super().__init__(env)
        self.std = float(std)
        self.rng = rng

    def observation(self, observation: Any) -> Any:
        """The observation plus fresh noise (unchanged when ``std`` is 0)."""
        if self.std == 0.0:
            return observation
        obs = np.asarray(observation)
        return (obs + self.rng.normal(0.0, self.std, size=obs.shape)).astype(obs.dtype, copy=False)


class NoisyObsWorker(VecWorker):
    """``worker=vec`` whose environments return noisy observations (see the module docstring)."""

    def __init__(self, *, noise_std: float = 0.05, n_envs: int = 4, **kwargs: Any) -> None:
        if noise_std < 0:
            raise ConfigError(f"worker.noise_std must be >= 0, got {noise_std}")
        super().__init__(n_envs=n_envs, **kwargs)
        self.noise_std = float(noise_std)
        self.noise_rngs = [np.random.default_rng(child_seed(s, NOISE_STREAM)) for s in self.env_seeds]

    def _on_new_envs(self) -> None:
        # Called by corral whenever the worker gets new environments: wrap them before the
        # vectorised worker sizes its buffers from their spaces.
        self.envs = [
            env if isinstance(env, ObservationNoise) else ObservationNoise(env, self.noise_std, self.noise_rngs[j])
            for j, env in enumerate(self.envs)
        ]
        super()._on_new_envs()

    def state_dict(self) -> dict[str, Any]:
        """The vectorised worker's state plus the noise generators' states."""
        state = super().state_dict()
        state["obs_noise"] = [rng.bit_generator.state for rng in self.noise_rngs]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        for rng, rng_state in zip(self.noise_rngs, state.get("obs_noise", [])):
            rng.bit_generator.state = rng_state


__all__ = ["NOISE_STREAM", "NoisyObsConfig", "NoisyObsWorker", "ObservationNoise"]
