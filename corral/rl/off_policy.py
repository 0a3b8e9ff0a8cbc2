"""What SAC and DQN share: the replay buffer, the off-policy loop, Polyak averaging, snapshot state.

The loop, one trainer epoch at a time::

    episodes = algo.sample(itr, batch_size)   # the sampler, with the current agent update
    algo.train_once(itr, episodes)            # add to the buffer, then the gradient steps

``train_once`` adds every step of the batch to the replay buffer (whole episodes from the
``default``/``vec`` workers or fragments from the ``fragment`` worker alike), then, once the
buffer holds ``min_buffer_size`` transitions (None, the default: :data:`DEFAULT_MIN_BUFFER_SIZE`),
runs ``utd_ratio`` gradient steps per new environment step (or a fixed ``gradient_steps`` per
epoch). Until then the agent update asks the
policy to explore (uniform random actions for SAC, epsilon = 1 for DQN), with noise drawn from
the policy's per-slot streams, so the same seed gives the same episodes whatever the sampler.

The workers' policy (its parameters and its exploration state) changes only between epochs, so
``min_buffer_size`` takes effect at an epoch's end: the policy explores for whole epochs until the
buffer holds ``max(min_buffer_size, 1)`` transitions, i.e. for the first
``ceil(max(min_buffer_size, 1) / trainer.batch_size)`` epochs (:func:`warmup_steps`). Where that
differs from a given ``min_buffer_size`` a fresh run's first :meth:`OffPolicyAlgorithm.train_once` says
so in one warning line (:meth:`OffPolicyAlgorithm.warmup_warning`). The default, None, is SB3's
``learning_starts`` (:data:`DEFAULT_MIN_BUFFER_SIZE`) rounded up to whole epochs, the same steps as
a given 100, and says nothing: the user did not ask for 100 exactly (with any ``trainer.batch_size``
of 100 or more it is the first epoch, which always explores).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvSpec, child_seed
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.normalization import reject_normalized_state
from corral.rl.replay_buffer import ReplayBuffer

#: Spawn-key branches of the off-policy algorithm's own RNGs (workers use 0, 1, ...).
BUFFER_BRANCH = 2**31 - 3
TORCH_BRANCH = 2**31 - 4

logger = logging.getLogger(__name__)


@torch.no_grad()
def polyak_update(source: Iterable[torch.Tensor], target: Iterable[torch.Tensor], tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target``, in place (``tau=1`` copies)."""
    for s, t in zip(source, target, strict=True):
        if tau == 1.0:
            t.copy_(s)
        else:
            t.mul_(1.0 - tau).add_(s, alpha=tau)


def gradient_steps_due(credit: float, n_new: int, utd_ratio: float, fixed: int | None) -> tuple[int, float]:
    """Gradient steps for ``n_new`` fresh environment steps and the fractional credit carried on:
    ``fixed`` per call when set, else ``utd_ratio`` per new step (fractions add up across calls)."""
    if fixed is not None:
        return int(fixed), credit
    credit += utd_ratio * n_new
    steps = math.floor(credit + 1e-9)
    return steps, credit - steps


#: What ``algo.min_buffer_size`` null (the default) stands for: SB3's ``learning_starts`` default,
#: rounded up to whole epochs like any value (and, not given by the user, never warned about).
DEFAULT_MIN_BUFFER_SIZE = 100


def effective_min_buffer_size(min_buffer_size: int | None) -> int:
    """The transitions before gradient steps start: ``min_buffer_size``, or
    :data:`DEFAULT_MIN_BUFFER_SIZE` for None; at least 1 (the first epoch always explores)."""
    return max(DEFAULT_MIN_BUFFER_SIZE if min_buffer_size is None else min_buffer_size, 1)


def warmup_steps(min_buffer_size: int | None, batch_size: int) -> int:
    """Environment steps that explore before the first learned policy acts, with epochs of
    ``batch_size`` steps: whole epochs until the buffer holds :func:`effective_min_buffer_size`
    transitions."""
    return math.ceil(effective_min_buffer_size(min_buffer_size) / batch_size) * batch_size


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` (>= 1) that is at most ``at_most``."""
    best = 1
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            best = max([best, *(x for x in (d, n // d) if x <= at_most)])
    return best


def networks_state(modules: Mapping[str, nn.Module], optimizers: Mapping[str, torch.optim.Optimizer]
                   ) -> dict[str, Any]:
    """Copies of the modules' and optimisers' states, for snapshots."""
    return {
        "modules": {k: {n: t.clone() for n, t in m.state_dict().items()} for k, m in modules.items()},
        "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
    }


def load_networks_state(modules: Mapping[str, nn.Module], optimizers: Mapping[str, torch.optim.Optimizer],
                        state: Mapping[str, Any]) -> None:
    """Restore :func:`networks_state`'s output."""
    for k, m in modules.items():
        m.load_state_dict(state["modules"][k])
    for k, o in optimizers.items():
        o.load_state_dict(state["optimizers"][k])


class OffPolicyAlgorithm(Algorithm):
    """Base of the replay-buffer algorithms.

    Subclasses implement :meth:`gradient_step` (one minibatch update, returning statistics) and
    :meth:`update_exploration` (what the policy's exploration state is at a given number of
    environment steps), and register their networks and optimisers in ``self.modules`` and
    ``self.optimizers`` so :meth:`state_dict` snapshots them.
    """

    #: Off-policy methods learn from transitions, so fragments (``worker=fragment``) are fine.
    accepts_fragments = True
    #: Policy options this algorithm trains (checked before any worker starts).
    policies: tuple[str, ...] = ()
    #: Action spaces it supports: ``"discrete"`` and/or ``"continuous"``.
    action_spaces: tuple[str, ...] = ("discrete", "continuous")
    #: Applied to every sampled minibatch before its gradient step; running normalisation
    #: (``normalize.obs`` / ``normalize.reward``) sets it, the buffer keeps raw transitions.
    minibatch_transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: How the policy acts before learning starts, in the warm-up warning (``act ...``).
    warmup_actions: str = "explore"

    def __init__(
        self,
        env_spec: EnvSpec,
        policy: Policy,
        sampler: Sampler | None,
        *,
        seed: int,
        buffer_size: int,
        min_buffer_size: int | None,
        batch_size: int,
        utd_ratio: float,
        gradient_steps: int | None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"algo.batch_size must be >= 1, got {batch_size}")
        if min_buffer_size is not None and min_buffer_size < 0:
            raise ConfigError(f"algo.min_buffer_size must be >= 0, got {min_buffer_size}")
        if buffer_size < effective_min_buffer_size(min_buffer_size):
            raise ConfigError(
                f"algo.buffer_size ({buffer_size}) must be at least algo.min_buffer_size "
                f"({effective_min_buffer_size(min_buffer_size)}{' (null)' if min_buffer_size is None else ''})"
            )
        if gradient_steps is None and not utd_ratio > 0:
            raise ConfigError(f"algo.utd_ratio must be > 0 (or set algo.gradient_steps), got {utd_ratio}")
        if gradient_steps is not None and gradient_steps < 0:
            raise ConfigError(f"algo.gradient_steps must be >= 0 (or null to use utd_ratio), got {gradient_steps}")
        self.env_spec = env_spec
        self.policy = policy
        self.sampler = sampler
        self.batch_size = int(batch_size)
        #: Transitions before gradient steps start; None: :data:`DEFAULT_MIN_BUFFER_SIZE`, not warned about.
        self.min_buffer_size = None if min_buffer_size is None else int(min_buffer_size)
        self.utd_ratio = float(utd_ratio)
        self.gradient_steps = gradient_steps
        root = np.random.SeedSequence(seed)
        self.replay_buffer = ReplayBuffer(buffer_size, child_seed(root, BUFFER_BRANCH))
        self.torch_rng = torch.Generator().manual_seed(int(child_seed(root, TORCH_BRANCH).generate_state(1, np.uint64)[0] >> 1))
        self.env_steps = 0
        self.n_updates = 0
        self._update_credit = 0.0  # fractional gradient steps carried to the next epoch
        self._warmup_checked = False  # the warm-up warning is given once, at a fresh run's first epoch
        self.modules: dict[str, nn.Module] = {"policy": policy}  # type: ignore[dict-item]
        self.optimizers: dict[str, torch.optim.Optimizer] = {}

    # ------------------------------------------------------------------ the loop
    def warmup_warning(self, epoch_steps: int) -> str | None:
        """The warning line when the steps that explore, with epochs of ``epoch_steps`` steps (the first
        epoch's, which ``trainer.batch_size`` sets), differ from a given ``algo.min_buffer_size`` (the
        workers' policy changes only between epochs); None when they agree, and for the default (None),
        which asks for the first epoch, what runs."""
        asked = self.min_buffer_size
        if asked is None:
            return None
        steps = warmup_steps(asked, epoch_steps)
        if steps == max(asked, 1):
            return None
        epochs = steps // epoch_steps
        what = (f"algo.min_buffer_size={asked} counts in whole epochs (the workers' policy changes only between "
                f"epochs, and this run's first epoch collected {epoch_steps:,} steps), so the first {steps:,} "
                f"environment steps ({epochs} epoch{'s' if epochs > 1 else ''}) {self.warmup_actions}"
                f"{f', not the first {asked:,}' if asked > 1 else ''}{self.warmup_note(steps)}")
        if asked <= 1:
            return (f"{what}; no update comes before the first epoch ends, so lower trainer.batch_size for fewer, or "
                    f"set algo.min_buffer_size={steps} to ask for what runs")
        divisor = largest_divisor(asked, epoch_steps)
        exact = f"make trainer.batch_size a divisor of it (trainer.batch_size={divisor}), or " if divisor > 1 else ""
        return (f"{what}; for {asked:,}, {exact}set algo.min_buffer_size to a multiple of the epoch's steps "
                f"({steps} is what runs now)")

    def warmup_note(self, steps: int) -> str:
        """What else the ``steps`` exploring steps override, appended to the warm-up warning (e.g.
        DQN's ``, and they use the first ... steps of the epsilon schedule ...``)."""
        return ""

    def first_epoch_warnings(self, epoch_steps: int) -> list[str]:
        """The warning lines (without ``corral: warning:``) of a fresh run's first epoch, which collected
        ``epoch_steps`` steps: :meth:`warmup_warning`'s, if any; subclasses add those of their own options
        that count in whole epochs."""
        message = self.warmup_warning(epoch_steps)
        return [] if message is None else [message]

    @property
    def learning_started(self) -> bool:
        """True once the buffer holds :func:`effective_min_buffer_size` transitions (gradient steps run)."""
        return len(self.replay_buffer) >= effective_min_buffer_size(self.min_buffer_size)

    def n_gradient_steps(self, n_new: int) -> int:
        """Gradient steps for ``n_new`` fresh environment steps (0 before learning starts)."""
        if not self.learning_started:
            return 0
        steps, self._update_credit = gradient_steps_due(self._update_credit, n_new, self.utd_ratio,
                                                        self.gradient_steps)
        return steps

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """Add ``episodes`` to the replay buffer, then run this epoch's gradient steps. A fresh run's
        first epoch says in one warning line each when a given option is not what its epochs do
        (:meth:`first_epoch_warnings`: ``min_buffer_size``, and the subclass's own)."""
        if not self._warmup_checked:
            self._warmup_checked = True
            if self.env_steps == 0 and len(episodes):
                for message in self.first_epoch_warnings(len(episodes)):
                    logger.warning("corral: %s", message)
        before = self.env_steps
        self.replay_buffer.add(episodes)
        self.env_steps += len(episodes)
        self.before_gradient_steps(before, self.env_steps)
        history: dict[str, list[float]] = {}
        for _ in range(self.n_gradient_steps(len(episodes))):
            batch = self.replay_buffer.sample_torch(self.batch_size)
            if self.minibatch_transform is not None:
                batch = self.minibatch_transform(batch)
            stats = self.gradient_step(batch)
            self.n_updates += 1
            for k, v in stats.items():
                history.setdefault(k, []).append(float(v))
        self.update_exploration(self.env_steps)
        out = {k: float(np.mean(v)) for k, v in history.items()}
        out.update(self.exploration_stats())
        out["replay/size"] = float(len(self.replay_buffer))
        out["replay/n_updates"] = float(self.n_updates)
        return out

    def before_gradient_steps(self, env_steps_before: int, env_steps_after: int) -> None:
        """Hook run after the batch is stored and before the gradient steps (target updates, ...)."""

    def gradient_step(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One minibatch update; returns statistics (averaged over the epoch's steps)."""
        raise NotImplementedError

    def update_exploration(self, env_steps: int) -> None:
        """Set the policy's exploration state for sampling after ``env_steps`` environment steps."""

    def exploration_stats(self) -> dict[str, float]:
        """Exploration statistics to log (epsilon and such)."""
        return {}

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimisers, the replay buffer (contents and RNG), the torch RNG, counters."""
        return {
            **networks_state(self.modules, self.optimizers),
            "replay_buffer": self.replay_buffer.state_dict(),
            "torch_rng": self.torch_rng.get_state(),
            "env_steps": self.env_steps,
            "n_updates": self.n_updates,
            "update_credit": self._update_credit,
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        reject_normalized_state(state)
        load_networks_state(self.modules, self.optimizers, state)
        self.replay_buffer.load_state_dict(state["replay_buffer"])
        self.torch_rng.set_state(state["torch_rng"])
        self.env_steps = int(state["env_steps"])
        self.n_updates = int(state["n_updates"])
        self._update_credit = float(state["update_credit"])
        self.load_extra_state(state.get("extra") or {})

    def extra_state(self) -> dict[str, Any]:
        """Subclass state beyond modules and optimisers (e.g. a learned temperature)."""
        return {}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`extra_state`'s output."""


__all__ = [
    "BUFFER_BRANCH", "DEFAULT_MIN_BUFFER_SIZE", "TORCH_BRANCH", "OffPolicyAlgorithm", "effective_min_buffer_size",
    "gradient_steps_due", "largest_divisor", "load_networks_state", "networks_state", "polyak_update", "warmup_steps",
]
