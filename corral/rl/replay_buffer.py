"""A replay buffer of transitions fed from :class:`~corral.framework.batch.EpisodeBatch`es.

Each step of a batch becomes one transition ``(observation, action, reward, next_observation,
terminal)``. Only a TERMINAL step ends bootstrapping (``terminal`` true, no value after it); a
TIMEOUT step and the last step of a fragment (an episode cut at a batch boundary, last step MID)
keep ``terminal`` false and bootstrap from their next observation, which for the last step of an
episode or fragment is the batch's ``last_observations`` row. The step type of every transition
is stored as well, so what happened at the end of an episode stays visible.

Sampling draws indices from the buffer's own seeded numpy ``Generator``; :meth:`state_dict`
holds the stored transitions and that generator's state, so a run restored from a snapshot
samples exactly the minibatches it would have sampled without the interruption.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from corral.framework.batch import EpisodeBatch, StepType

#: The arrays a transition is made of, in the order :meth:`ReplayBuffer.state_dict` stores them.
FIELDS = ("observations", "actions", "rewards", "next_observations", "terminals", "step_types")


class ReplayBuffer:
    """A ring buffer of up to ``capacity`` transitions with seeded uniform sampling.

    Storage is allocated on the first :meth:`add` (shapes and dtypes come from the batch). When
    full, the oldest transitions are overwritten first.
    """

    def __init__(self, capacity: int, seed: int | np.random.SeedSequence | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self._data: dict[str, np.ndarray] = {}
        self._next = 0  # where the next transition goes
        self._size = 0
        self.total_added = 0

    def __len__(self) -> int:
        """Number of transitions stored (at most ``capacity``)."""
        return self._size

    # ------------------------------------------------------------------ adding
    def add(self, episodes: EpisodeBatch) -> int:
        """Store every step of ``episodes`` as a transition; returns how many were added."""
        n = len(episodes)
        if n == 0:
            return 0
        step_types = episodes.step_types
        rows = {
            "observations": episodes.observations,
            "actions": episodes.actions,
            "rewards": episodes.rewards,
            "next_observations": episodes.next_observations,
            "terminals": step_types == StepType.TERMINAL,
            "step_types": step_types,
        }
        if not self._data:
            self._allocate(rows)
        else:
            for name, arr in rows.items():
                have = self._data[name]
                if arr.shape[1:] != have.shape[1:]:
                    raise ValueError(
                        f"replay buffer holds {name} rows of shape {have.shape[1:]}, got rows of shape {arr.shape[1:]}"
                    )
        if n > self.capacity:  # only the newest `capacity` steps can stay
            rows = {k: v[n - self.capacity :] for k, v in rows.items()}
            self.total_added += n - self.capacity
            n = self.capacity
        idx = (self._next + np.arange(n)) % self.capacity
        for name, arr in rows.items():
            self._data[name][idx] = arr
        self._next = int((self._next + n) % self.capacity)
        self._size = min(self._size + n, self.capacity)
        self.total_added += n
        return len(episodes)

    def _allocate(self, rows: Mapping[str, np.ndarray]) -> None:
        for name, arr in rows.items():
            self._data[name] = np.zeros((self.capacity, *arr.shape[1:]), dtype=arr.dtype)

    # ------------------------------------------------------------------ sampling
    def sample_indices(self, batch_size: int) -> np.ndarray:
        """``batch_size`` indices drawn uniformly (with replacement) from the stored transitions."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self.rng.integers(0, self._size, size=int(batch_size))

    def get(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at ``indices`` as a dict of numpy arrays (copies)."""
        return {name: arr[indices] for name, arr in self._data.items()}

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """A uniformly drawn minibatch: ``observations``, ``actions``, ``rewards``,
        ``next_observations``, ``terminals`` (true only for TERMINAL steps) and ``step_types``."""
        return self.get(self.sample_indices(batch_size))

    def sample_torch(self, batch_size: int) -> dict[str, Any]:
        """:meth:`sample` as float32 tensors (actions of integer dtype stay int64)."""
        import torch

        data = self.sample(batch_size)
        out: dict[str, Any] = {}
        for name, arr in data.items():
            if name in ("actions", "step_types") and arr.dtype.kind in "iu":
                out[name] = torch.from_numpy(arr.astype(np.int64, copy=False))
            else:
                out[name] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
        return out

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (only the filled part), the write position and the RNG state."""
        return {
            "capacity": self.capacity,
            "next": self._next,
            "size": self._size,
            "total_added": self.total_added,
            "data": {name: arr[: self._size].copy() for name, arr in self._data.items()},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the capacity must match)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"snapshot replay buffer has capacity {state['capacity']}, this one {self.capacity}; "
                "resume with the same buffer_size"
            )
        self._size = int(state["size"])
        self._next = int(state["next"])
        self.total_added = int(state["total_added"])
        data = state["data"]
        if data:
            self._allocate(data)
            for name, arr in data.items():
                self._data[name][: self._size] = arr
        else:
            self._data = {}
        self.rng.bit_generator.state = state["rng"]


__all__ = ["FIELDS", "ReplayBuffer"]
