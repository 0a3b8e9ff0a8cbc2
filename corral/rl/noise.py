"""Per-environment action-noise streams that make sampling independent of batching.

A stochastic policy draws its exploration noise here instead of from a global RNG. Each row of a
batch is one environment slot with its own key; the noise of a step is a pure function of
(key, episode index, step index in the episode, component). So an environment gets the same noise
whether it is stepped alone (``default`` worker), in a batch of 32 (``vec``), in another process or
in a server batching every worker: same seed, same episodes, whatever the sampler.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_EPISODE_MUL = np.uint64(0xD1B54A32D192ED03)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (uint64 arithmetic wraps)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


class NoiseStreams:
    """Counter-based noise for ``n`` environment slots.

    ``reset(mask)`` starts a new episode for the masked slots; each ``uniform``/``normal`` call
    reads the noise of the current step; ``advance()`` moves every slot one step on.
    """

    def __init__(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        self._keys = np.array([s.generate_state(1, np.uint64)[0] for s in seeds], dtype=np.uint64)
        self._episodes = np.zeros(len(seeds), dtype=np.uint64)
        self.steps = np.zeros(len(seeds), dtype=np.uint64)
        self._episode_base: np.ndarray | None = None  # _mix(keys ^ episodes * _EPISODE_MUL), per slot
        self._components: dict[tuple[int, int], np.ndarray] = {}  # (n, offset) -> component offsets

    # keys and episodes feed the cached per-episode hash: assigning either drops the cache.
    @property
    def keys(self) -> np.ndarray:
        """One 64-bit key per slot."""
        return self._keys

    @keys.setter
    def keys(self, value: np.ndarray) -> None:
        self._keys = value
        self._episode_base = None

    @property
    def episodes(self) -> np.ndarray:
        """Episode counter of each slot."""
        return self._episodes

    @episodes.setter
    def episodes(self, value: np.ndarray) -> None:
        self._episodes = value
        self._episode_base = None

    def __len__(self) -> int:
        return len(self._keys)

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start a new episode in the slots where ``mask`` is true (all slots when None)."""
        if mask is None:
            self._episodes += np.uint64(1)
            self.steps[:] = 0
        else:
            mask = np.asarray(mask, dtype=bool)
            self._episodes[mask] += np.uint64(1)
            self.steps[mask] = 0
        self._episode_base = None

    def advance(self) -> None:
        """Move every slot to its next step."""
        self.steps += np.uint64(1)

    def _bits(self, n_components: int, offset: int) -> np.ndarray:
        # Same bits as _mix(_mix(_mix(keys ^ episodes*MUL) + steps*GOLDEN)[:, None] + (offset+1+c)*GOLDEN);
        # the per-episode hash is cached until a reset and the component offsets per (n, offset).
        base = self._episode_base
        if base is None:
            base = self._episode_base = _mix(self._keys ^ (self._episodes * _EPISODE_MUL))
        comp = self._components.get((n_components, offset))
        if comp is None:
            comp = (np.arange(offset, offset + n_components, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
            self._components[(n_components, offset)] = comp
        return _mix(_mix(base + self.steps * _GOLDEN)[:, None] + comp)

    def uniform(self, n_components: int = 1, offset: int = 0) -> np.ndarray:
        """``[n_slots, n_components]`` uniforms in (0, 1) for the current step."""
        # ((bits >> 11) + 0.5) / 2**53, computed as (bits >> 11) * 2**-53 + 2**-54: the integer is
        # below 2**53 (exact in float64) and scaling by powers of two commutes with rounding.
        return (self._bits(n_components, offset) >> _S11) * (1.0 / 9007199254740992.0) + (1.0 / 18014398509481984.0)

    def normal(self, n_components: int = 1, offset: int = 0) -> np.ndarray:
        """``[n_slots, n_components]`` standard normals for the current step (Box-Muller)."""
        u = self.uniform(2 * n_components, offset)
        u1, u2 = u[:, :n_components], u[:, n_components:]
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Counters and keys, for snapshots."""
        return {"keys": self.keys.copy(), "episodes": self.episodes.copy(), "steps": self.steps.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`."""
        self.keys = np.array(state["keys"], dtype=np.uint64)
        self.episodes = np.array(state["episodes"], dtype=np.uint64)
        self.steps = np.array(state["steps"], dtype=np.uint64)
