"""The server side of an action server: one thread that answers every worker's agent calls.

The thread waits on a doorbell semaphore that every post rings (polling it for ``spin_s`` first,
then sleeping on it). Awake, it collects the posts (each worker's ``posted`` semaphore, taken
without blocking: that also makes the worker's writes visible), answers control calls (seed,
state, parameters) at once, and serves a group of workers as soon as every *busy* worker of the
group (one with a command outstanding) has posted: one batched ``get_actions`` for all of their
environments (:class:`~corral.parallel.slot_state.AgentPool`), actions written back, each worker's
``answered`` semaphore released. A worker that has finished its share is not busy, so it never
holds the others up; the sampler rings the doorbell whenever a worker's business changes (a reply
arrived, a command was sent, a worker was restarted).

A worker held back that way is waiting, not stuck: a few times a second the thread bumps its slot's
``HELD`` counter (its proxy then keeps waiting, however long the busy worker takes) and calls
``on_hold(i)`` (the sampler then does not count the wait against the worker's ``timeout``). So
when one worker hangs in its environment, it alone shows no progress and is the one reported.

With one group this is rlpyt's GPU sampler; with two, the alternating sampler: while one group's
forward pass runs, the other group's workers step their environments.

Everything the thread touches is guarded by ``lock``; the sampler takes it to apply agent updates,
restart a worker's slot, or shut down.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import traceback
from typing import Any, Callable, Sequence

import numpy as np

from corral.framework.policy import Policy
from corral.parallel.action_proxy import ProxyEndpoint
from corral.parallel.action_slot import (
    CALL,
    DETERMINISTIC,
    ERROR,
    GET_ACTIONS,
    HELD,
    KIND,
    META_LEN,
    META_VERSION,
    OK,
    RESET,
    RESET_ROWS,
    STATUS,
    SlotLayout,
    SlotView,
    poll_acquire,
    response_meta,
)
from corral.parallel.slot_state import AgentPool

logger = logging.getLogger(__name__)

#: Seconds the serving thread sleeps at most before looking again (a shutdown is seen this fast).
_IDLE_S = 0.2
#: Seconds between two signs of life given to the workers the thread holds back.
_HOLD_EVERY_S = 0.1


class _ServerSlot:
    """The server's side of worker ``i``'s slot: segment, views, semaphores, response layout."""

    def __init__(self, ctx: Any, worker_number: int, obs_bytes: int, resp_bytes: int) -> None:
        self.worker_number = worker_number
        self.layout, self.shm = SlotLayout.create(obs_bytes, resp_bytes)
        self.view = SlotView(self.layout, self.shm.buf)
        self.posted = ctx.Semaphore(0)
        self.answered = ctx.Semaphore(0)
        self.meta: Any = None
        self.meta_version = 0
        self.views: list[np.ndarray] = []

    def renew(self, ctx: Any) -> None:
        """Fresh semaphores and an idle header (for a restarted worker)."""
        self.posted = ctx.Semaphore(0)
        self.answered = ctx.Semaphore(0)
        self.view.header[KIND] = 0
        self.meta = None

    def write_response(self, actions: np.ndarray, infos: dict[str, np.ndarray]) -> None:
        """Copy the actions and infos into the response area (describing it anew when it changed)."""
        h = self.view.header
        meta = response_meta(actions, infos, self.layout.resp_bytes)
        if meta != self.meta:
            data = pickle.dumps(meta, protocol=pickle.HIGHEST_PROTOCOL)
            self.view.meta[: len(data)] = np.frombuffer(data, dtype=np.uint8)
            h[META_LEN] = len(data)
            self.meta_version += 1
            h[META_VERSION] = self.meta_version
            self.meta = meta
            self.views = self.view.response_views(meta)
        self.views[0][...] = actions
        for view, value in zip(self.views[1:], infos.values()):
            view[...] = value

    def close(self) -> None:
        """Unmap and unlink the segment; drop the semaphores (freed when unreferenced)."""
        self.views = []
        self.view.release()
        try:
            self.shm.close()
        except BufferError:  # pragma: no cover - a view escaped; unlinking still frees the name
            pass
        try:
            self.shm.unlink()
        except FileNotFoundError:  # pragma: no cover
            pass
        self.posted = self.answered = None


class ActionServer:
    """Serves the agent calls of ``n_workers`` workers split into ``groups`` (see the module docstring).

    Args:
        ctx: the multiprocessing context the workers start with (semaphores must match it).
        groups: worker numbers served together, e.g. ``[[0, 1]]`` or ``[[0], [1]]``.
        prepare: turns a Policy into the instance the server runs (copy, move to the device).
        busy: ``busy(i)`` is true while worker ``i`` has a command outstanding.
        obs_bytes, resp_bytes: capacity of each slot's observation and response areas.
        timeout: seconds a worker waits for an answer before giving up (counted from the server's
            last sign of life: a worker held back for a busy one waits as long as it is busy).
        on_hold: ``on_hold(i)`` is called, a few times a second, while worker ``i``'s posted
            ``get_actions`` is held back because another worker of its group is busy.
        spin_s: seconds a worker (and the serving thread) polls for what it waits for before
            sleeping on its semaphore (see :func:`~corral.parallel.action_slot.poll_acquire`).
    """

    def __init__(self, ctx: Any, n_workers: int, groups: Sequence[Sequence[int]],
                 prepare: Callable[[Policy], Policy], busy: Callable[[int], bool], *, obs_bytes: int,
                 resp_bytes: int, timeout: float, spin_s: float = 0.0,
                 on_hold: Callable[[int], None] | None = None) -> None:
        self.ctx = ctx
        self.spin_s = spin_s
        self.groups = [list(g) for g in groups]
        self.busy = busy
        self.on_hold = on_hold
        self.timeout = timeout
        self.lock = threading.RLock()
        self.pool = AgentPool(self.groups, prepare)
        self.doorbell = ctx.Semaphore(0)
        self.slots: list[_ServerSlot] = []
        self.n_served_steps = 0
        #: Seconds spent answering get_actions (everything) and in the policy's forward passes alone.
        self.serve_s = 0.0
        self.forward_s = 0.0
        #: Worker requests answered by batched forward passes (sum over steps of the workers served).
        self.n_served_requests = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self._posts: dict[int, int] = {}
        self._held_at = float("-inf")
        try:
            for i in range(n_workers):
                self.slots.append(_ServerSlot(ctx, i, obs_bytes, resp_bytes))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ for the sampler
    def endpoint(self, i: int) -> ProxyEndpoint:
        """What worker ``i``'s process needs (passed at its start)."""
        s = self.slots[i]
        return ProxyEndpoint(i, s.layout, s.posted, s.answered, self.doorbell, self.timeout, self.spin_s)

    def restart_slot(self, i: int) -> None:
        """Worker ``i`` is being restarted: new semaphores, its pending post and state dropped."""
        with self.lock:
            self._posts.pop(i, None)
            self.slots[i].renew(self.ctx)
            self.pool.forget(i)

    def start(self) -> None:
        """Start the serving thread."""
        self._thread = threading.Thread(target=self._run, name="corral-action-server", daemon=True)
        self._thread.start()

    def ring(self) -> None:
        """Wake the serving thread (a worker's business changed)."""
        if self.doorbell is not None:
            self.doorbell.release()

    def apply_agent_update(self, update: Any, n_workers: int) -> bool:
        """Apply an agent update to the server's policies; True when workers need a fresh proxy
        (a new Policy: they reseed their slots)."""
        if update is None:
            return False
        with self.lock:
            if isinstance(update, Policy):
                self.pool.set_policy(update)
                return True
            if isinstance(update, list):
                if all(u is update[0] for u in update):
                    return self.apply_agent_update(update[0], n_workers)
                self.pool.set_per_worker(update)
                return any(isinstance(u, Policy) for u in update)
            self.pool.set_params(update)
            return False

    def close(self, join_s: float = 5.0) -> None:
        """Stop the thread (bounded) and free every segment and semaphore. Idempotent."""
        self._stop = True
        if self._thread is not None:
            self.ring()
            self._thread.join(join_s)
            self._thread = None
        with self.lock:
            for slot in self.slots:
                slot.close()
            self.slots = []
            self.doorbell = None
            self.pool = AgentPool(self.groups, self.pool.prepare)

    # ------------------------------------------------------------------ the serving thread
    def _run(self) -> None:
        while not self._stop:
            doorbell = self.doorbell
            if doorbell is None:
                return
            if not poll_acquire(doorbell, self.spin_s):
                doorbell.acquire(timeout=_IDLE_S)
            with self.lock:
                if self._stop:
                    return
                try:
                    self._serve()
                except Exception:  # noqa: BLE001 - never let the thread die silently
                    logger.exception("the action server failed")

    def _serve(self) -> None:
        posts = self._posts
        for slot in self.slots:
            if slot.worker_number not in posts and slot.posted.acquire(False):
                posts[slot.worker_number] = int(slot.view.header[KIND])
        for i, kind in list(posts.items()):
            if kind == GET_ACTIONS:
                continue
            del posts[i]
            self._answer_control(i, kind)
        held: list[int] = []
        for group in self.groups:
            waiting = [i for i in group if i in posts]
            if not waiting:
                continue
            if any(self.busy(i) for i in group if i not in posts):
                held.extend(waiting)
                continue
            for i in waiting:
                del posts[i]
            self._answer_actions(waiting)
        if held:
            self._hold(held)

    def _hold(self, workers: list[int]) -> None:
        """Tell ``workers`` (and the sampler) that their requests are held back, not lost."""
        now = time.monotonic()
        if now - self._held_at < _HOLD_EVERY_S:
            return
        self._held_at = now
        for i in workers:
            self.slots[i].view.header[HELD] += 1
            if self.on_hold is not None:
                self.on_hold(i)

    def _answer_control(self, i: int, kind: int) -> None:
        slot = self.slots[i]
        view = slot.view
        try:
            if kind == RESET:
                self._apply_reset(i, view)
            elif kind == CALL:
                method, args = view.read_blob()
                view.write_blob(self._control(i, method, args))
            else:
                raise ValueError(f"unknown request kind {kind}")
            view.header[STATUS] = OK
        except Exception:  # noqa: BLE001 - reported to the worker, which reports it to the sampler
            view.header[STATUS] = ERROR
            view.write_blob(traceback.format_exc())
        view.header[KIND] = 0
        slot.answered.release()

    def _apply_reset(self, i: int, view: SlotView) -> None:
        rows = int(view.header[RESET_ROWS])
        if rows == -1:
            self.pool.reset(i, None)
        elif rows > 0:
            self.pool.reset(i, view.mask[:rows].copy())
        view.header[RESET_ROWS] = 0

    def _control(self, i: int, method: str, args: tuple) -> Any:
        pool = self.pool
        if method == "seed":
            return pool.seed(i, *args)
        if method == "get_sampling_state":
            return pool.get_sampling_state(i)
        if method == "set_sampling_state":
            return pool.set_sampling_state(i, *args)
        if method == "get_param_values":
            return pool.get_param_values(i)
        if method == "set_param_values":
            items: list[Any] = [None] * len(self.slots)
            items[i] = args[0]
            return pool.set_per_worker(items)
        raise ValueError(f"the action server does not serve {method!r}")

    def _answer_actions(self, workers: list[int]) -> None:
        t0 = time.perf_counter()
        try:
            observations = []
            deterministic = []
            for i in workers:
                view = self.slots[i].view
                self._apply_reset(i, view)
                observations.append(view.read_obs())
                deterministic.append(bool(view.header[DETERMINISTIC]))
            t1 = time.perf_counter()
            results = self.pool.get_actions(workers, observations, deterministic)
            self.forward_s += time.perf_counter() - t1
            for i, (actions, infos) in zip(workers, results):
                self.slots[i].write_response(np.asarray(actions), {k: np.asarray(v) for k, v in infos.items()})
                self.slots[i].view.header[STATUS] = OK
            self.n_served_steps += 1
            self.n_served_requests += len(workers)
        except Exception:  # noqa: BLE001 - every waiting worker gets the error
            text = traceback.format_exc()
            for i in workers:
                view = self.slots[i].view
                view.header[STATUS] = ERROR
                view.write_blob(text)
        for i in workers:
            self.slots[i].view.header[KIND] = 0
            self.slots[i].answered.release()
        self.serve_s += time.perf_counter() - t0


__all__ = ["ActionServer"]
