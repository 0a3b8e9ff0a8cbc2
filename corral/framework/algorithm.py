"""The Algorithm contract: consume episodes, improve a policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from corral.framework.batch import EpisodeBatch
from corral.framework.policy import Policy

if TYPE_CHECKING:  # pragma: no cover
    from corral.framework.sampler import Sampler


class Algorithm(ABC):
    """Owns its policy and networks; ``train_once`` is the unit of work.

    The trainer asks the algorithm for episodes (``sample``, by default ``obtain_samples`` on its
    sampler with ``get_agent_update()``), hands them to ``train_once``, and snapshots
    ``state_dict()``. Subclasses set ``self.policy`` and ``self.sampler``.

    Optional: ``meta_evaluate(env, *, seed) -> dict[str, float]``. When an algorithm has it (meta-RL),
    the trainer's evaluation adds its statistics (e.g. ``meta_eval/return_ep{i}`` adaptation curves
    on held-out tasks) to the epoch's logged statistics.
    """

    policy: Policy
    sampler: "Sampler | None" = None
    #: The fraction (0 to 1) of the run's budget done before the current update: what the trainer last
    #: passed to :meth:`set_training_progress` (0 until it does).
    training_progress: float = 0.0

    def set_training_progress(self, done: float) -> None:
        """Called by the trainer before each ``train_once`` with the fraction (0 to 1) of the run's
        budget done before this epoch's update: environment steps over ``trainer.max_env_steps``, or
        epochs over ``trainer.n_epochs``, whichever is further along (0 at the first epoch). A schedule
        (PPO's ``algo.anneal_lr``) reads :attr:`training_progress`."""
        self.training_progress = float(done)

    def get_agent_update(self) -> Any:
        """What the workers need to act with the current policy (by default its parameters)."""
        return self.policy.get_param_values()

    def get_env_update(self, itr: int) -> Any:
        """An environment update for this epoch (None: keep the environments)."""
        return None

    def sample(self, itr: int, batch_size: int) -> EpisodeBatch:
        """Collect the episodes of epoch ``itr``."""
        if self.sampler is None:
            raise RuntimeError(f"{type(self).__name__} has no sampler; pass sampler= when building it")
        return self.sampler.obtain_samples(itr, batch_size, self.get_agent_update(), self.get_env_update(itr))

    @abstractmethod
    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """Improve the policy from ``episodes``; return statistics to log (losses and such)."""

    @property
    def eval_policy(self) -> Policy:
        """The policy evaluation runs (deterministically)."""
        return self.policy

    def state_dict(self) -> dict[str, Any]:
        """Everything a snapshot needs: parameters, optimiser states, RNG states, counters."""
        raise NotImplementedError(f"{type(self).__name__} does not implement state_dict()")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        raise NotImplementedError(f"{type(self).__name__} does not implement load_state_dict()")


__all__ = ["Algorithm"]
