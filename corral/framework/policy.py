"""The Policy contract: the agent a worker runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np


class Policy(ABC):
    """An agent that maps a batch of observations to a batch of actions.

    Contract (numpy in, numpy out, batched; one row per environment slot):

    - ``get_actions(observations) -> (actions, agent_infos)``. ``agent_infos`` is a dict of
      arrays with one row per observation (log-probabilities and such).
    - ``reset(dones=None)``: a new episode starts in the slots where ``dones`` is true (all slots
      when None); recurrent state and per-slot noise counters are reset there.
    - ``get_param_values()`` / ``set_param_values(params)``: what an ``agent_update`` carries.
    - ``seed(seeds)``: one seed sequence per environment slot; a stochastic policy draws its
      exploration noise per slot so that episodes do not depend on how slots are batched.
    - ``deterministic``: when true, ``get_actions`` returns the mode (evaluation).
    """

    deterministic: bool = False
    recurrent: bool = False

    @abstractmethod
    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions and agent infos for a batch of observations."""

    def get_action(self, observation: np.ndarray) -> tuple[Any, dict[str, Any]]:
        """Convenience: one observation in, one action out."""
        actions, infos = self.get_actions(np.asarray(observation)[None])
        return actions[0], {k: v[0] for k, v in infos.items()}

    def reset(self, dones: np.ndarray | None = None) -> None:
        """Start new episodes in the slots where ``dones`` is true (all when None)."""

    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        """Give the policy one noise stream per environment slot."""

    @abstractmethod
    def get_param_values(self) -> dict[str, np.ndarray]:
        """The parameters, as numpy arrays that can be shipped to another process."""

    @abstractmethod
    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters produced by :meth:`get_param_values`."""

    def get_sampling_state(self) -> dict[str, Any]:
        """Per-slot state that sampling advances (noise counters, recurrent state), for snapshots."""
        return {}

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_sampling_state`'s output."""


def check_box_observations(option: str, space: Any) -> None:
    """Raise a one-line :class:`~corral.framework.errors.ConfigError` when ``space`` is not a
    gymnasium ``Box`` (a vector of numbers), which ``option`` (``policy=mlp``) needs; the message
    says how such an environment is given one."""
    import gymnasium as gym

    from corral.framework.errors import ConfigError

    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(f"{option} needs a Box observation space (numbers), got {space}; an environment plugin can "
                          "wrap the environment in gymnasium.wrappers.FlattenObservation (one-hot for Discrete) "
                          "to give it one (docs/plugins.md)")


__all__ = ["Policy", "check_box_observations"]
