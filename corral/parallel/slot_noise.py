"""The per-slot noise plumbing every stochastic policy needs: seeding, episode resets, snapshots."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corral.rl.noise import NoiseStreams


class SlotNoiseMixin:
    """Gives a :class:`~corral.framework.policy.Policy` one :class:`NoiseStreams` slot per environment.

    ``seed(seeds)`` makes the streams, ``reset(dones)`` starts new episodes in the masked slots,
    :meth:`streams_for` hands them to ``get_actions`` (checking the batch size), and the sampling
    state (stream counters) goes into snapshots.
    """

    _streams: NoiseStreams | None = None

    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        """One noise stream per environment slot."""
        self._streams = NoiseStreams(seeds)

    def reset(self, dones: np.ndarray | None = None) -> None:
        """New episodes in the masked slots (all when None)."""
        if self._streams is not None:
            self._streams.reset(dones)

    def streams_for(self, n: int) -> NoiseStreams:
        """The streams for a batch of ``n`` observations (unseeded policies get fresh entropy)."""
        if self._streams is None:
            self._streams = NoiseStreams(np.random.SeedSequence().spawn(n))
        if len(self._streams) != n:
            raise ValueError(
                f"the policy was seeded for {len(self._streams)} environment slots but got {n} observations; "
                "call policy.seed() with one seed per slot"
            )
        return self._streams

    def get_sampling_state(self) -> dict[str, Any]:
        """Noise-stream counters."""
        return {"streams": self._streams.state_dict() if self._streams is not None else None}

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore the noise-stream counters."""
        if state.get("streams") is not None:
            if self._streams is None:
                self._streams = NoiseStreams([])
            self._streams.load_state_dict(state["streams"])


__all__ = ["SlotNoiseMixin"]
