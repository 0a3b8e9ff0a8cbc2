"""Step types and the EpisodeBatch: the one data structure that flows from workers to algorithms."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from corral.framework.errors import BatchError

if TYPE_CHECKING:  # pragma: no cover
    import torch


class StepType(enum.IntEnum):
    """Where a time step sits in its episode.

    ``TERMINAL`` means the environment ended the episode (gymnasium's ``terminated``): there is no
    future value. ``TIMEOUT`` means the episode was cut (``truncated`` or the worker's
    ``max_episode_length``): a bootstrapping algorithm must still value the last observation.
    """

    FIRST = 0
    MID = 1
    TERMINAL = 2
    TIMEOUT = 3

    @classmethod
    def get_step_type(cls, step: int, terminated: bool, truncated: bool) -> "StepType":
        """Step type of the ``step``-th step (1-based) of an episode given gymnasium's flags."""
        if terminated:
            return cls.TERMINAL
        if truncated:
            return cls.TIMEOUT
        if step == 1:
            return cls.FIRST
        return cls.MID


_STEP_ARRAYS = ("observations", "actions", "rewards", "step_types")


def _as_dict(d: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, order="C") for k, v in (d or {}).items()}


@dataclass(frozen=True, eq=False)
class EpisodeBatch:
    """A validated batch of episodes stored flat, one row per time step.

    Per step (``N = lengths.sum()`` rows): ``observations``, ``actions``, ``rewards``,
    ``step_types`` and the dictionaries ``env_infos`` and ``agent_infos``.
    Per episode (``n_episodes`` rows): ``lengths``, ``last_observations`` (the observation after
    the last step) and ``episode_infos`` (task ids, worker numbers and such).

    An episode whose last step is neither TERMINAL nor TIMEOUT is a *fragment*; it is only
    accepted when ``allow_fragments`` is true (FragmentWorker, action servers).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    step_types: np.ndarray
    lengths: np.ndarray
    last_observations: np.ndarray
    env_infos: dict[str, np.ndarray] = field(default_factory=dict)
    agent_infos: dict[str, np.ndarray] = field(default_factory=dict)
    episode_infos: dict[str, np.ndarray] = field(default_factory=dict)
    allow_fragments: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # C-contiguous storage (a copy only for strided input), so to_torch() never has to copy.
        set_(self, "lengths", np.asarray(self.lengths, dtype=np.int64, order="C").reshape(-1))
        set_(self, "step_types", np.asarray(self.step_types, dtype=np.uint8, order="C").reshape(-1))
        set_(self, "rewards", np.asarray(self.rewards, dtype=np.float32, order="C").reshape(-1))
        set_(self, "observations", np.asarray(self.observations, order="C"))
        set_(self, "actions", np.asarray(self.actions, order="C"))
        set_(self, "last_observations", np.asarray(self.last_observations, order="C"))
        set_(self, "env_infos", _as_dict(self.env_infos))
        set_(self, "agent_infos", _as_dict(self.agent_infos))
        set_(self, "episode_infos", _as_dict(self.episode_infos))
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        n_steps = int(self.lengths.sum())
        n_eps = len(self.lengths)
        if n_eps and self.lengths.min() < 1:
            raise BatchError(f"every episode needs at least one step; lengths were {self.lengths.tolist()}")
        for name in _STEP_ARRAYS:
            arr = getattr(self, name)
            if arr.ndim == 0 or arr.shape[0] != n_steps:
                raise BatchError(
                    f"EpisodeBatch.{name} must have one row per step: expected {n_steps} rows "
                    f"(sum of lengths), got shape {arr.shape}"
                )
        if self.last_observations.shape[:1] != (n_eps,):
            raise BatchError(
                f"EpisodeBatch.last_observations must have one row per episode: expected {n_eps}, "
                f"got shape {self.last_observations.shape}"
            )
        if n_eps and self.last_observations.shape[1:] != self.observations.shape[1:]:
            raise BatchError(
                f"last_observations rows have shape {self.last_observations.shape[1:]} but observations "
                f"rows have shape {self.observations.shape[1:]}"
            )
        for kind, infos, rows in (
            ("env_infos", self.env_infos, n_steps),
            ("agent_infos", self.agent_infos, n_steps),
            ("episode_infos", self.episode_infos, n_eps),
        ):
            for key, arr in infos.items():
                if arr.ndim == 0 or arr.shape[0] != rows:
                    raise BatchError(f"{kind}[{key!r}] must have {rows} rows, got shape {arr.shape}")
        if n_steps and self.step_types.max() > StepType.TIMEOUT:
            raise BatchError(f"unknown step type {int(self.step_types.max())}")
        if n_eps:
            ends = np.cumsum(self.lengths) - 1
            starts = ends - self.lengths + 1
            last = self.step_types[ends]
            complete = (last == StepType.TERMINAL) | (last == StepType.TIMEOUT)
            if not self.allow_fragments and not complete.all():
                bad = int(np.flatnonzero(~complete)[0])
                raise BatchError(
                    f"episode {bad} ends with step type {StepType(int(last[bad])).name}, not TERMINAL or "
                    "TIMEOUT; only a worker that returns fragments may do that (allow_fragments=True)"
                )
            inner = np.ones(n_steps, dtype=bool)
            inner[ends] = False
            inner[starts] = False
            if (self.step_types[inner] != StepType.MID).any():
                raise BatchError("only the first and last step of an episode may be other than MID")
            if ((last == StepType.FIRST) & (self.lengths > 1)).any():
                bad = int(np.flatnonzero((last == StepType.FIRST) & (self.lengths > 1))[0])
                raise BatchError(f"episode {bad} has {int(self.lengths[bad])} steps but its last step is FIRST")
            first_ok = (self.step_types[starts] == StepType.FIRST) | (self.lengths == 1) | (
                self.allow_fragments & (self.step_types[starts] == StepType.MID)
            )
            if not first_ok.all():
                bad = int(np.flatnonzero(~first_ok)[0])
                raise BatchError(f"episode {bad} does not start with a FIRST step")

    # ------------------------------------------------------------------ sizes
    @property
    def n_episodes(self) -> int:
        """Number of episodes (or fragments) in the batch."""
        return len(self.lengths)

    def __len__(self) -> int:
        """Number of time steps in the batch."""
        return int(self.lengths.sum())

    @property
    def starts(self) -> np.ndarray:
        """Index of each episode's first row."""
        return np.cumsum(self.lengths) - self.lengths

    @property
    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each episode."""
        if not self.n_episodes:
            return np.zeros(0, dtype=np.float64)
        return np.add.reduceat(self.rewards.astype(np.float64), self.starts)

    @property
    def terminals(self) -> np.ndarray:
        """Boolean per step: the environment ended the episode here (no bootstrap)."""
        return self.step_types == StepType.TERMINAL

    @property
    def timeouts(self) -> np.ndarray:
        """Boolean per step: the episode was cut here (bootstrap from the next observation)."""
        return self.step_types == StepType.TIMEOUT

    @property
    def complete(self) -> np.ndarray:
        """Boolean per episode: the episode ends with TERMINAL or TIMEOUT (not a fragment)."""
        if not self.n_episodes:
            return np.zeros(0, dtype=bool)
        last = self.step_types[np.cumsum(self.lengths) - 1]
        return (last == StepType.TERMINAL) | (last == StepType.TIMEOUT)

    @property
    def next_observations(self) -> np.ndarray:
        """The observation after each step: the next row, or ``last_observations`` at an episode's end."""
        nxt = np.empty_like(self.observations)
        if len(self):
            nxt[:-1] = self.observations[1:]
            nxt[np.cumsum(self.lengths) - 1] = self.last_observations
        return nxt

    # ------------------------------------------------------------------ padded views
    def pad(self, array: np.ndarray, max_length: int | None = None, fill: float = 0) -> np.ndarray:
        """Reshape a per-step array into ``[n_episodes, max_length, ...]``, padding with ``fill``."""
        array = np.asarray(array)
        max_length = int(max_length or (self.lengths.max() if self.n_episodes else 0))
        out = np.full((self.n_episodes, max_length) + array.shape[1:], fill, dtype=array.dtype)
        out[self.valids(max_length)] = array
        return out

    def valids(self, max_length: int | None = None) -> np.ndarray:
        """Boolean ``[n_episodes, max_length]`` mask of the real (unpadded) steps."""
        max_length = int(max_length or (self.lengths.max() if self.n_episodes else 0))
        return np.arange(max_length)[None, :] < self.lengths[:, None]

    @property
    def padded_observations(self) -> np.ndarray:
        """Observations as ``[n_episodes, max_len, ...]``."""
        return self.pad(self.observations)

    @property
    def padded_actions(self) -> np.ndarray:
        """Actions as ``[n_episodes, max_len, ...]``."""
        return self.pad(self.actions)

    @property
    def padded_rewards(self) -> np.ndarray:
        """Rewards as ``[n_episodes, max_len]``."""
        return self.pad(self.rewards)

    # ------------------------------------------------------------------ split / concatenate
    def split(self) -> list["EpisodeBatch"]:
        """One single-episode batch per episode, in order."""
        out = []
        starts = self.starts
        for i, (s, n) in enumerate(zip(starts, self.lengths)):
            sl = slice(int(s), int(s + n))
            out.append(
                EpisodeBatch(
                    observations=self.observations[sl],
                    actions=self.actions[sl],
                    rewards=self.rewards[sl],
                    step_types=self.step_types[sl],
                    lengths=self.lengths[i : i + 1],
                    last_observations=self.last_observations[i : i + 1],
                    env_infos={k: v[sl] for k, v in self.env_infos.items()},
                    agent_infos={k: v[sl] for k, v in self.agent_infos.items()},
                    episode_infos={k: v[i : i + 1] for k, v in self.episode_infos.items()},
                    allow_fragments=self.allow_fragments,
                )
            )
        return out

    @classmethod
    def concatenate(cls, *batches: "EpisodeBatch") -> "EpisodeBatch":
        """Join batches end to end. Every batch must carry the same info keys."""
        if len(batches) == 1 and not isinstance(batches[0], EpisodeBatch):
            batches = tuple(batches[0])  # type: ignore[arg-type]
        batches = tuple(b for b in batches if b.n_episodes)
        if not batches:
            raise BatchError("cannot concatenate zero non-empty batches")
        if len(batches) == 1:
            return batches[0]

        def keys_of(attr: str) -> list[str]:
            first = set(getattr(batches[0], attr))
            for b in batches[1:]:
                if set(getattr(b, attr)) != first:
                    raise BatchError(
                        f"cannot concatenate batches whose {attr} keys differ: "
                        f"{sorted(first)} vs {sorted(getattr(b, attr))}"
                    )
            return sorted(first)

        def cat(attr: str) -> np.ndarray:
            return np.concatenate([getattr(b, attr) for b in batches])

        def cat_infos(attr: str) -> dict[str, np.ndarray]:
            return {k: np.concatenate([getattr(b, attr)[k] for b in batches]) for k in keys_of(attr)}

        return cls(
            observations=cat("observations"),
            actions=cat("actions"),
            rewards=cat("rewards"),
            step_types=cat("step_types"),
            lengths=cat("lengths"),
            last_observations=cat("last_observations"),
            env_infos=cat_infos("env_infos"),
            agent_infos=cat_infos("agent_infos"),
            episode_infos=cat_infos("episode_infos"),
            allow_fragments=any(b.allow_fragments for b in batches),
        )

    # ------------------------------------------------------------------ torch
    def to_torch(self) -> dict[str, Any]:
        """Zero-copy torch views of every array (they share memory with this batch; a read-only array,
        such as one deserialised from Ray's object store, is copied instead).

        Returns a dict with the top-level arrays as tensors and the info dictionaries as
        dictionaries of tensors. Arrays of dtypes torch cannot view (strings, objects) are skipped.
        """
        import torch

        def view(a: np.ndarray) -> "torch.Tensor | None":
            if a.dtype.kind in "OUSV":
                return None
            if not a.flags.writeable:  # e.g. deserialised from Ray's object store: torch cannot share it
                return torch.from_numpy(np.array(a))
            return torch.from_numpy(np.ascontiguousarray(a))

        out: dict[str, Any] = {}
        for name in (*_STEP_ARRAYS, "lengths", "last_observations"):
            out[name] = view(getattr(self, name))
        for name in ("env_infos", "agent_infos", "episode_infos"):
            out[name] = {k: t for k, v in getattr(self, name).items() if (t := view(v)) is not None}
        return out

    # ------------------------------------------------------------------ comparison
    def equals(self, other: "EpisodeBatch", *, infos_rtol: float | None = None) -> bool:
        """True when every array (and every info array) is equal.

        With ``infos_rtol`` the float agent_infos are compared with that relative tolerance
        (batched and unbatched forward passes may differ in the last bits).
        """
        return not self.differences(other, infos_rtol=infos_rtol)

    def differences(self, other: "EpisodeBatch", *, infos_rtol: float | None = None) -> list[str]:
        """Names of the arrays that differ between this batch and ``other`` (empty when equal)."""
        diffs = []
        for name in (*_STEP_ARRAYS, "lengths", "last_observations"):
            a, b = getattr(self, name), getattr(other, name)
            if a.shape != b.shape or not np.array_equal(a, b):
                diffs.append(name)
        for name in ("env_infos", "agent_infos", "episode_infos"):
            da, db = getattr(self, name), getattr(other, name)
            if set(da) != set(db):
                diffs.append(f"{name} keys")
                continue
            for k in da:
                a, b = da[k], db[k]
                if a.shape != b.shape:
                    diffs.append(f"{name}[{k}]")
                elif name == "agent_infos" and infos_rtol is not None and a.dtype.kind == "f":
                    if not np.allclose(a, b, rtol=infos_rtol, atol=infos_rtol):
                        diffs.append(f"{name}[{k}]")
                elif not np.array_equal(a, b):
                    diffs.append(f"{name}[{k}]")
        return diffs

    def __repr__(self) -> str:
        return (
            f"EpisodeBatch(n_episodes={self.n_episodes}, n_steps={len(self)}, "
            f"obs_shape={self.observations.shape[1:]}, action_shape={self.actions.shape[1:]}, "
            f"agent_infos={sorted(self.agent_infos)}, episode_infos={sorted(self.episode_infos)})"
        )


def nonfinite_values(batch: EpisodeBatch) -> str | None:
    """Where a batch holds NaN or infinite observations or rewards (what an environment that blew up
    returns), in words: ``"observations: NaN in 206 of 256 steps (first at step 50 of episode 0)"``;
    None when every value is finite. Integer arrays (images) cannot hold either and are not read."""
    found = []
    starts = np.concatenate([[0], np.cumsum(batch.lengths)[:-1]]) if len(batch.lengths) else np.zeros(0, int)
    for name in ("observations", "rewards", "last_observations"):
        values = getattr(batch, name)
        if values.dtype.kind not in "fc" or values.size == 0:
            continue
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if not bad.any():
            continue
        first = int(np.argmax(bad))
        kind = "NaN" if np.isnan(values[bad]).any() else "infinite values"
        unit = "steps" if name != "last_observations" else "episodes"
        if name == "last_observations":
            where = f"episode {first}'s last observation"
        else:
            episode = int(np.searchsorted(starts, first, side="right") - 1)
            where = f"step {first - int(starts[episode])} of episode {episode}"
        found.append(f"{name}: {kind} in {int(bad.sum()):,} of {len(values):,} {unit} (first at {where})")
    return "; ".join(found) or None


def concatenate(batches: Iterable[EpisodeBatch]) -> EpisodeBatch:
    """Function form of :meth:`EpisodeBatch.concatenate`."""
    return EpisodeBatch.concatenate(*list(batches))


def episode_from_arrays(
    *,
    observations: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    step_types: np.ndarray,
    last_observation: np.ndarray,
    agent_infos: Mapping[str, np.ndarray] | None = None,
    env_infos: Mapping[str, np.ndarray] | None = None,
    episode_infos: Mapping[str, Any] | None = None,
    allow_fragments: bool = False,
) -> EpisodeBatch:
    """Build a one-episode batch from per-step arrays (episode_infos are scalars)."""
    return EpisodeBatch(
        observations=observations,
        actions=actions,
        rewards=rewards,
        step_types=step_types,
        lengths=np.array([len(rewards)]),
        last_observations=np.asarray(last_observation)[None],
        agent_infos=dict(agent_infos or {}),
        env_infos=dict(env_infos or {}),
        episode_infos={k: np.asarray([v]) for k, v in (episode_infos or {}).items()},
        allow_fragments=allow_fragments,
    )


__all__: Sequence[str] = ["StepType", "EpisodeBatch", "concatenate", "episode_from_arrays", "nonfinite_values"]
