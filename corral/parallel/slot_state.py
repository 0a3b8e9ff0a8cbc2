"""The policies an action server runs, and the per-slot sampling state of every worker's slots.

A worker's environment slots have state on the server side: their exploration-noise counters
(:class:`~corral.rl.noise.NoiseStreams`) and, for a recurrent policy, their hidden state. The
server batches the slots of every posting worker into one ``get_actions`` call, so the policy
instance must hold exactly the rows of the workers in that batch, in worker order.

:class:`AgentPool` keeps that true. Each worker is assigned to a policy instance (one per group of
workers for a broadcast update; one per distinct item of a per-worker update list). An instance
holds the state of its *resident* workers; when a call needs another set of workers, the state of
the residents is taken out (``get_sampling_state``), split into per-worker pieces, and the
pieces of the new set are concatenated back in (``set_sampling_state``). In steady state (every
worker of an instance posting every step) nothing moves. A reset for a worker that is not
resident is queued and applied, in order, when it next becomes resident.

Each of those calls of a policy that moves state (``get_sampling_state``, ``set_sampling_state``,
a queued ``reset``) runs inside :attr:`AgentPool.calling` (its name and the workers whose rows it
moves), so that the action server can name it, rather than the call it was made for (a forward
pass, a ``seed``, an agent update), when it does not return.

Requirement on a policy's ``get_sampling_state()``: a tree (dicts, lists, tuples) whose per-slot
leaves are arrays (numpy or torch) with the slot as their leading dimension; other leaves are
treated as global and kept as they are.
"""

from __future__ import annotations

import copy
import itertools
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from corral.framework.policy import Policy


# ---------------------------------------------------------------------- state trees
def _rows_of(leaf: Any) -> int | None:
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) >= 1 else None


def split_state(tree: Any, sizes: Sequence[int]) -> list[Any]:
    """Cut a state tree whose per-slot leaves have ``sum(sizes)`` rows into one tree per worker."""
    total = sum(sizes)
    if len(sizes) == 1:
        return [tree]
    if isinstance(tree, dict):
        parts = {k: split_state(v, sizes) for k, v in tree.items()}
        return [{k: parts[k][i] for k in tree} for i in range(len(sizes))]
    if isinstance(tree, (list, tuple)):
        columns = [split_state(v, sizes) for v in tree]
        return [type(tree)(c[i] for c in columns) for i in range(len(sizes))]
    if _rows_of(tree) == total:
        bounds = list(itertools.accumulate(sizes))
        return [tree[b - n : b] for b, n in zip(bounds, sizes)]
    return [copy.deepcopy(tree) for _ in sizes]


def concat_state(trees: Sequence[Any], sizes: Sequence[int]) -> Any:
    """Join per-worker state trees (``sizes[i]`` rows each) into one, in order."""
    if len(trees) == 1:
        return trees[0]
    first = trees[0]
    if isinstance(first, dict):
        return {k: concat_state([t[k] for t in trees], sizes) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(concat_state([t[j] for t in trees], sizes) for j in range(len(first)))
    if all(_rows_of(t) == n for t, n in zip(trees, sizes)):
        if type(first).__module__.startswith("torch"):
            import torch

            return torch.cat(list(trees))
        return np.concatenate(trees)
    return first


def take_rows(tree: Any, total: int, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a state tree with ``total`` rows (global leaves as they are)."""
    if isinstance(tree, dict):
        return {k: take_rows(v, total, start, stop) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(take_rows(v, total, start, stop) for v in tree)
    if _rows_of(tree) == total:
        return copy.deepcopy(tree[start:stop])
    return copy.deepcopy(tree)


# ---------------------------------------------------------------------- the pool
def not_recorded(what: str, workers: tuple[int, ...]) -> AbstractContextManager[Any]:
    """:attr:`AgentPool.calling` of a pool whose calls nobody records: nothing."""
    return nullcontext()


@dataclass
class _Instance:
    policy: Policy
    group: int
    resident: tuple[int, ...] = ()


@dataclass
class AgentPool:
    """Policy instances and worker state for an action server (see the module docstring).

    ``groups[g]`` lists the workers served together; ``prepare`` turns a Policy into the
    instance the server runs (deep copy, move to the device); ``calling(what, workers)`` is
    entered around each call of a policy that moves slot state (``get_sampling_state``,
    ``set_sampling_state``, a queued ``reset``; ``workers``: whose rows it moves).
    """

    groups: Sequence[Sequence[int]]
    prepare: Callable[[Policy], Policy]
    calling: Callable[[str, tuple[int, ...]], AbstractContextManager[Any]] = not_recorded
    template: Policy | None = None
    instances: dict[int, _Instance] = field(default_factory=dict)
    agent_of: dict[int, int] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)
    stored: dict[int, Any] = field(default_factory=dict)
    pending: dict[int, list[np.ndarray]] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)

    def group_of(self, worker: int) -> int:
        """The group worker ``worker`` belongs to."""
        for g, members in enumerate(self.groups):
            if worker in members:
                return g
        raise KeyError(worker)

    # ------------------------------------------------------------------ updates
    def set_policy(self, policy: Policy) -> None:
        """A new agent for every worker: one instance per group."""
        self.template = policy
        self._assign({(g, 0): (list(members), policy, None) for g, members in enumerate(self.groups)})

    def set_params(self, params: Any) -> None:
        """New parameters for every worker."""
        by_group = {self.instances[self.agent_of[w]].group for w in self.agent_of}
        shared = all(len({self.agent_of.get(w) for w in members}) == 1 for members in self.groups)
        if shared and len(self.instances) == len(by_group):
            for inst in self.instances.values():
                inst.policy.set_param_values(params)
            return
        self._assign({(g, 0): (list(members), None, params) for g, members in enumerate(self.groups)})

    def set_per_worker(self, items: Sequence[Any]) -> None:
        """One update per worker: a Policy, parameters, or None (unchanged). Workers given the same
        object (and in the same group) share an instance."""
        plan: dict[tuple[int, int], tuple[list[int], Any, Any]] = {}
        for w, item in enumerate(items):
            if item is None:
                continue
            key = (self.group_of(w), id(item))
            if key not in plan:
                plan[key] = ([], item, None) if isinstance(item, Policy) else ([], None, item)
            plan[key][0].append(w)
        if any(p is not None for _, p, _ in plan.values()):
            self.template = next(p for _, p, _ in plan.values() if p is not None)
        self._assign(plan)

    def _assign(self, plan: dict[Any, tuple[list[int], Policy | None, Any]]) -> None:
        if self.template is None:
            raise RuntimeError("the action server received parameters before a policy; give the sampler a Policy first")
        moving = {w for workers, _, _ in plan.values() for w in workers}
        for w in moving:
            if w in self.agent_of:
                self._evict(self.instances[self.agent_of[w]])
        for workers, policy, params in plan.values():
            instance = self.prepare(policy if policy is not None else self.template)
            if params is not None:
                instance.set_param_values(params)
            key = next(self._ids)
            self.instances[key] = _Instance(instance, self.group_of(workers[0]))
            for w in workers:
                self.agent_of[w] = key
        used = set(self.agent_of.values())
        for key in [k for k in self.instances if k not in used]:
            del self.instances[key]

    # ------------------------------------------------------------------ residency
    def _evict(self, inst: _Instance) -> None:
        if not inst.resident:
            return
        sizes = [self.rows[w] for w in inst.resident]
        with self.calling("get_sampling_state", inst.resident):
            state = inst.policy.get_sampling_state()
        for w, part in zip(inst.resident, split_state(state, sizes)):
            self.stored[w] = part
        inst.resident = ()

    def _resident(self, workers: tuple[int, ...]) -> _Instance:
        inst = self.instances[self.agent_of[workers[0]]]
        if inst.resident == workers:
            return inst
        self._evict(inst)
        missing = [w for w in workers if w not in self.stored]
        if missing:
            raise RuntimeError(f"worker {missing[0]}'s agent was never seeded; give the sampler a Policy first")
        sizes = [self.rows[w] for w in workers]
        state = concat_state([self.stored.pop(w) for w in workers], sizes)
        with self.calling("set_sampling_state", workers):
            inst.policy.set_sampling_state(state)
        inst.resident = workers
        total = sum(sizes)
        offset = 0
        for w, n in zip(workers, sizes):
            for mask in self.pending.pop(w, []):
                full = np.zeros(total, dtype=bool)
                full[offset : offset + n] = mask
                with self.calling("reset", (w,)):
                    inst.policy.reset(full)
            offset += n
        return inst

    def _offset(self, inst: _Instance, worker: int) -> tuple[int, int]:
        offset = 0
        for w in inst.resident:
            if w == worker:
                return offset, offset + self.rows[w]
            offset += self.rows[w]
        raise KeyError(worker)

    # ------------------------------------------------------------------ the calls workers make
    def seed(self, worker: int, seeds: Sequence[np.random.SeedSequence]) -> None:
        """Fresh noise streams (and state) for the worker's slots."""
        inst = self.instances[self.agent_of[worker]]
        self._evict(inst)
        inst.policy.seed(list(seeds))
        self.rows[worker] = len(seeds)
        self.pending.pop(worker, None)
        self.stored.pop(worker, None)
        inst.resident = (worker,)

    def reset(self, worker: int, mask: np.ndarray | None) -> None:
        """New episodes in the masked slots of ``worker`` (all of them for None)."""
        n = self.rows.get(worker)
        if n is None:
            return
        mask = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        inst = self.instances[self.agent_of[worker]]
        if worker in inst.resident:
            start, stop = self._offset(inst, worker)
            total = sum(self.rows[w] for w in inst.resident)
            full = np.zeros(total, dtype=bool)
            full[start:stop] = mask
            inst.policy.reset(full)
        else:
            self.pending.setdefault(worker, []).append(mask.copy())

    def get_actions(self, workers: Sequence[int], observations: Sequence[np.ndarray],
                    deterministic: Sequence[bool]) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """One batched call per instance (and evaluation mode) for the posting ``workers``. The policy
        gets arrays of its own, never the ``observations`` themselves (views of shared memory that a
        call outliving the server must not hold): one worker's are copied, several are joined."""
        out: dict[int, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        batches: dict[tuple[int, bool], list[int]] = {}
        for k, w in enumerate(workers):
            batches.setdefault((self.agent_of[w], bool(deterministic[k])), []).append(k)
        for (_, det), idx in batches.items():
            members = tuple(workers[k] for k in idx)
            inst = self._resident(members)
            obs = observations[idx[0]].copy() if len(idx) == 1 else np.concatenate([observations[k] for k in idx])
            inst.policy.deterministic = det
            actions, infos = inst.policy.get_actions(obs)
            start = 0
            for k in idx:
                stop = start + len(observations[k])
                out[k] = (actions[start:stop], {key: v[start:stop] for key, v in infos.items()})
                start = stop
        return [out[k] for k in range(len(workers))]

    def get_sampling_state(self, worker: int) -> Any:
        """The worker's rows of its instance's sampling state."""
        inst = self.instances[self.agent_of[worker]]
        if worker not in inst.resident:
            inst = self._resident((worker,))
        start, stop = self._offset(inst, worker)
        total = sum(self.rows[w] for w in inst.resident)
        return take_rows(inst.policy.get_sampling_state(), total, start, stop)

    def set_sampling_state(self, worker: int, state: Any) -> None:
        """Replace the worker's rows."""
        inst = self.instances[self.agent_of[worker]]
        self._evict(inst)
        self.stored[worker] = copy.deepcopy(state)
        self.pending.pop(worker, None)

    def get_param_values(self, worker: int) -> Any:
        """The parameters the worker's slots are served with."""
        return self.instances[self.agent_of[worker]].policy.get_param_values()

    def forget(self, worker: int) -> None:
        """A restarted worker: its state is gone (it seeds afresh)."""
        inst = self.instances.get(self.agent_of.get(worker, -1))
        if inst is not None and worker in inst.resident:
            self._evict(inst)
        self.stored.pop(worker, None)
        self.pending.pop(worker, None)
        self.rows.pop(worker, None)


__all__ = ["AgentPool", "concat_state", "not_recorded", "split_state", "take_rows"]
