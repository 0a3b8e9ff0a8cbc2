"""Per-task replay buffers (PEARL keeps one for RL and one for context per meta-train task).

:class:`TaskReplayBuffers` maps a task id to a :class:`~corral.rl.replay_buffer.ReplayBuffer`
created on the task's first episode. Episodes are routed by ``episode_infos["task_id"]``. One
seeded generator, held by the collection and saved in its snapshot, draws every minibatch, so a
resumed run samples exactly what the uninterrupted one would have, whichever tasks it meets next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Mapping

import numpy as np

from corral.framework.batch import EpisodeBatch
from corral.rl.replay_buffer import ReplayBuffer


class TaskReplayBuffers:
    """One replay buffer of up to ``capacity`` transitions per task id."""

    def __init__(self, capacity: int, seed: int | np.random.SeedSequence | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"per-task replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.buffers: dict[int, ReplayBuffer] = {}

    def __len__(self) -> int:
        """Transitions stored over all tasks."""
        return sum(len(b) for b in self.buffers.values())

    @property
    def task_ids(self) -> list[int]:
        """Ids of the tasks with at least one transition, ascending."""
        return sorted(t for t, b in self.buffers.items() if len(b))

    def buffer(self, task_id: int) -> ReplayBuffer:
        """Task ``task_id``'s buffer (created empty on first use)."""
        task_id = int(task_id)
        if task_id not in self.buffers:
            self.buffers[task_id] = ReplayBuffer(self.capacity)
        return self.buffers[task_id]

    def add(self, episodes: EpisodeBatch) -> None:
        """Store each episode in the buffer of its ``episode_infos["task_id"]``."""
        if "task_id" not in episodes.episode_infos:
            raise ValueError("per-task replay needs episode_infos['task_id'] (a task-running worker sets it)")
        ids = episodes.episode_infos["task_id"].astype(np.int64)
        if (ids < 0).any():
            raise ValueError("episodes without a task (task_id -1) cannot go into per-task replay buffers")
        parts = episodes.split()
        for task_id in np.unique(ids):
            chosen = [p for p, t in zip(parts, ids) if t == task_id]
            self.buffer(int(task_id)).add(EpisodeBatch.concatenate(*chosen))

    def sample(self, task_ids: Sequence[int] | np.ndarray, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` transitions from each of ``task_ids``: arrays ``[len(task_ids), batch_size, ...]``."""
        buffers = [self.buffers[int(t)] for t in task_ids]
        samples = [b.get(self.rng.integers(0, len(b), size=int(batch_size))) for b in buffers]
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}

    def state_dict(self) -> dict[str, Any]:
        """Every task's buffer state and the sampling generator's state."""
        return {"capacity": self.capacity, "rng": self.rng.bit_generator.state,
                "buffers": {t: b.state_dict() for t, b in self.buffers.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.buffers = {}
        for task_id, buffer_state in state["buffers"].items():
            self.buffer(int(task_id)).load_state_dict(buffer_state)
        self.rng.bit_generator.state = state["rng"]


__all__ = ["TaskReplayBuffers"]
