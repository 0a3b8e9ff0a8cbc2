"""Joining fragments into whole episodes.

A worker that steps its environments in fragments (its environments keep running from one rollout to
the next) can still hand out only whole episodes: the fragments of episodes that are still running
are kept, and joined to their continuation in a later rollout. No environment step is thrown away,
where a worker that restarts every environment for each rollout of whole episodes steps the slots
whose episodes have ended until its longest episode ends.

All of it is array code over the flat step arrays: one gather per rollout, no Python loop over
episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corral.framework.batch import EpisodeBatch, StepType


@dataclass
class RunningEpisodes:
    """The steps recorded so far of the episodes still running, at most one per environment slot.

    ``pieces`` holds them as fragments (each starts at its episode's first step, FIRST); ``slots[i]`` is
    the slot whose environment runs piece ``i``."""

    pieces: EpisodeBatch
    slots: np.ndarray

    @property
    def n_steps(self) -> int:
        """Steps held."""
        return len(self.pieces)


def _segments_index(sources: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row indices that lay the segments ``sources[j] : sources[j] + lengths[j]`` end to end."""
    total = int(lengths.sum())
    out_start = np.cumsum(lengths) - lengths
    return np.repeat(sources - out_start, lengths) + np.arange(total, dtype=np.int64)


def join_fragments(running: RunningEpisodes | None, fragments: EpisodeBatch,
                   fragment_slots: np.ndarray) -> tuple[EpisodeBatch | None, RunningEpisodes | None]:
    """Join ``fragments`` (one rollout's, ``fragment_slots[i]`` the slot of fragment ``i``) to the pieces
    of the episodes they continue (``running``).

    A fragment continues an episode when ``episode_infos["prior_length"]`` is above 0; the slot's running
    piece must then hold every earlier step of that episode. Returns the episodes that are now complete
    (ended TERMINAL or TIMEOUT), in the order of the fragments that completed them, and the pieces still
    running (None for either when there are none)."""
    n_frag = fragments.n_episodes
    frag_len = fragments.lengths
    frag_start = np.cumsum(frag_len) - frag_len
    prior = fragments.episode_infos.get("prior_length")
    continuing = np.zeros(n_frag, dtype=bool) if prior is None else np.asarray(prior) > 0
    head_len = np.zeros(n_frag, dtype=np.int64)
    head_start = np.zeros(n_frag, dtype=np.int64)
    n_run_steps = 0
    if continuing.any():
        if running is None:
            raise ValueError("a fragment continues an episode whose earlier steps were not kept")
        n_run_steps = running.n_steps
        piece_of_slot = np.full(int(max(running.slots.max(initial=0), fragment_slots.max())) + 1, -1, dtype=np.int64)
        piece_of_slot[running.slots] = np.arange(len(running.slots))
        piece = piece_of_slot[fragment_slots[continuing]]
        if (piece < 0).any():
            raise ValueError("a fragment continues an episode whose earlier steps were not kept")
        run_len = running.pieces.lengths
        run_start = np.cumsum(run_len) - run_len
        head_len[continuing] = run_len[piece]
        head_start[continuing] = run_start[piece]
        if (fragments.step_types[frag_start[continuing]] == StepType.FIRST).any():
            raise ValueError("a fragment with prior_length > 0 starts with a FIRST step")
    if running is not None and int(continuing.sum()) != len(running.slots):
        raise ValueError(f"{len(running.slots)} episodes were running but {int(continuing.sum())} fragments "
                         "continue one: every running episode must be continued by the next rollout")

    # The kept steps' rows, then the fragments' rows (per-step arrays only: the two differ in episode infos).
    parts = [fragments] if running is None or n_run_steps == 0 else [running.pieces, fragments]
    obs, actions, rewards, step_types = (np.concatenate([getattr(b, name) for b in parts])
                                         for name in ("observations", "actions", "rewards", "step_types"))
    agent_infos = {k: np.concatenate([b.agent_infos[k] for b in parts]) for k in fragments.agent_infos}
    env_infos = {k: np.concatenate([b.env_infos[k] for b in parts]) for k in fragments.env_infos}
    last = step_types[n_run_steps + frag_start + frag_len - 1]
    complete = (last == StepType.TERMINAL) | (last == StepType.TIMEOUT)

    def joined(mask: np.ndarray, allow_fragments: bool) -> EpisodeBatch:
        """The pieces ``mask`` selects, each its kept steps followed by its fragment."""
        sources = np.stack([head_start[mask], n_run_steps + frag_start[mask]], axis=1).reshape(-1)
        idx = _segments_index(sources, np.stack([head_len[mask], frag_len[mask]], axis=1).reshape(-1))
        return EpisodeBatch(
            observations=np.take(obs, idx, axis=0), actions=np.take(actions, idx, axis=0),
            rewards=np.take(rewards, idx), step_types=np.take(step_types, idx),
            lengths=head_len[mask] + frag_len[mask], last_observations=fragments.last_observations[mask],
            agent_infos={k: np.take(v, idx, axis=0) for k, v in agent_infos.items()},
            env_infos={k: np.take(v, idx, axis=0) for k, v in env_infos.items()},
            allow_fragments=allow_fragments,
        )

    done = joined(complete, False) if complete.any() else None
    still = (RunningEpisodes(joined(~complete, True), slots=np.asarray(fragment_slots[~complete], dtype=np.int64))
             if not complete.all() else None)
    return done, still
