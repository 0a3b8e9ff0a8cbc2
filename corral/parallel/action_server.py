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

Everything the thread touches is guarded by ``lock``; the sampler takes it to shut down (the wait
bounded: :class:`ServerBusy` when the thread holds it for ``timeout`` seconds). The thread runs every
call of the policy, agent updates and restarts included: the sampler hands it an update
(:meth:`ActionServer.apply_agent_update`) or a restarted worker's slot, whose state it takes out of
the policy (:meth:`ActionServer.restart_slot`), and waits for it, bounded, so that policy code that
does not return there is named like any other call of the policy, never a hang of the sampler's.

A call of the policy that does not return (a forward pass stuck on a lock or on a device that no
longer answers) is the server's fault, not its workers': :attr:`ActionServer.call` says which call
runs, for which workers, since when, so that the sampler can name it. The calls the
:class:`~corral.parallel.slot_state.AgentPool` makes to move slot state from one set of workers to
another (``get_sampling_state``, ``set_sampling_state``, a queued ``reset``), within a forward pass,
a ``seed`` or an agent update, are calls of their own there; the call they were made for resumes
after them, timed afresh; when one raises, it is recorded for every worker waiting for it
(:meth:`ActionServer.failure_of`, before they are answered) and raised as :class:`PolicyCallFailed`,
which names it. So is a forward pass's ``get_actions`` that raises, and a call of the policy's that
a worker asks for (``seed``, ``reset``, whose resets may ride along with its forward pass,
``get_sampling_state``, ``get_param_values``, ``set_param_values``; a worker's
``set_sampling_state`` reaches the policy only by moves of slot state): each waiting worker is
answered with the error, and :meth:`ActionServer.failure_of` says that the policy's call raised, not
the worker (for that request only: each record is stamped with the sequence number of the request
the worker waited for, so a worker that caught the error and went on is on its own again as soon as
it posts its next request, collected by the serving thread or not).

A call that does not return may return at any time later, or never, so the thread touches no slot
memory once closed (and makes no further call of the policy), and the policy never sees slot memory
at all (its observations are copies). A thread that does not stop when the server is
closed is abandoned: the names of its segments and semaphores are removed, but the segments stay
mapped for the life of the process (see :meth:`ActionServer.close`), since unmapping memory that a
thread may still read is what crashes a process.
"""

from __future__ import annotations

import ctypes
import logging
import pickle
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from corral.framework.policy import Policy
from corral.framework.worker import exception_summary
from corral.parallel.action_proxy import ProxyEndpoint
from corral.parallel.action_slot import (
    CALL,
    DETERMINISTIC,
    ERROR,
    GAVE_UP,
    GET_ACTIONS,
    HELD,
    KIND,
    META_LEN,
    META_VERSION,
    OK,
    RESET,
    RESET_ROWS,
    SEQ,
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
#: Seconds :meth:`ActionServer.close` waits for a thread whose call has already run ``timeout`` seconds.
_STUCK_JOIN_S = 0.5

#: The control calls a worker's proxy makes (its ``CALL`` requests).
_SERVED = frozenset({"seed", "get_sampling_state", "set_sampling_state", "get_param_values", "set_param_values"})
#: Those that call the policy's method of the same name for the worker: when it raises, the policy is at
#: fault (:meth:`ActionServer.failure_of`). A worker's ``set_sampling_state`` calls none of its own: the rows it
#: sets are stored, and reach the policy by moves of slot state (each recorded when it raises).
_POLICYS_OWN = frozenset({"seed", "get_sampling_state", "get_param_values", "set_param_values"})

#: What abandoned servers leave mapped (their segments' SharedMemory objects): a thread stuck in a call
#: may still read or write it, so it is never unmapped (see :func:`_keep_mapped`).
_ABANDONED: list[Any] = []


def _keep_mapped(obj: Any) -> None:
    """Keep ``obj`` (a SharedMemory) alive, and so mapped, until the process ends: referenced here and
    given one more reference that is never dropped, so that not even the interpreter's exit, which
    clears this module, frees it (freeing a SharedMemory unmaps its memory; a daemon thread can still
    be inside a call then)."""
    _ABANDONED.append(obj)
    pythonapi = getattr(ctypes, "pythonapi", None)  # CPython
    if pythonapi is not None:
        pythonapi.Py_IncRef(ctypes.py_object(obj))


class ServerCall:
    """A call of the server's policy: ``what`` (``get_actions``, or a control call: ``reset``,
    ``seed``, ``get_param_values``, ..., an agent update's ``set_param_values`` or ``deepcopy``, or
    a move of slot state within one of those: ``get_sampling_state``, ``set_sampling_state``, a
    queued ``reset``) for ``workers``, started at ``started`` and, once it has returned, ended at
    ``ended`` (``time.monotonic()``; set by the serving thread: ``ended`` once, ``started`` again
    when the call resumes after a move of slot state). ``waiters``: every worker whose answer waits
    for it (``workers`` and, say, the rest of a batch whose resets it applies)."""

    __slots__ = ("what", "workers", "waiters", "started", "ended")

    def __init__(self, what: str, workers: Sequence[int], started: float,
                 waiters: Sequence[int] = ()) -> None:
        self.what = what
        self.workers = tuple(workers)
        self.waiters = tuple(dict.fromkeys((*workers, *waiters)))
        self.started = started
        self.ended: float | None = None

    def __repr__(self) -> str:
        return f"ServerCall({self.what!r}, workers={list(self.workers)}, {self.seconds():.3f} s)"

    def seconds(self) -> float:
        """How long it ran (runs, while it has not returned)."""
        return (time.monotonic() if self.ended is None else self.ended) - self.started


class ServerBusy(RuntimeError):
    """The serving thread held the server's lock (or ran a call of the policy) for ``timeout`` seconds:
    stuck in ``call`` (None: in none of the policy's calls)."""

    def __init__(self, call: ServerCall | None, timeout: float) -> None:
        what = f"in the policy's {call.what} for workers {list(call.workers)}" if call is not None else "busy"
        super().__init__(f"the action server's thread has been {what} for more than {timeout:g} s")
        self.call = call


@dataclass(frozen=True)
class PolicyFailure:
    """A call of the server's policy raised: one that moves slot state (``moves``; ``call``:
    ``get_sampling_state``, ``set_sampling_state`` or a queued ``reset``, for the workers whose rows
    it moves), or one made for workers themselves (``moves`` False: a forward pass's ``get_actions``,
    a worker's ``seed``, ``reset``, ``get_sampling_state``, ``get_param_values`` or ``set_param_values``):
    ``summary`` (``"RuntimeError: ..."``, one line) and ``traceback`` (where it raised), as text, so
    that a record kept holds no frame (nor the slot memory a frame may refer to). ``within``: the
    call it was made for (a forward pass's ``get_actions``, a ``seed``, an agent update's
    ``deepcopy``...; None when it was made for no call of the policy's: a restarted worker's state
    going; for a worker's own call, what its resets rode along with: a forward pass)."""

    call: ServerCall
    within: ServerCall | None
    summary: str
    traceback: str
    moves: bool = True

    @classmethod
    def of(cls, call: ServerCall, within: ServerCall | None, exc: BaseException, moves: bool) -> "PolicyFailure":
        """The record of ``exc``, raised by the policy in ``call``."""
        return cls(call, within, exception_summary(exc),
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), moves)


class PolicyCallFailed(RuntimeError):
    """Raised where a move of slot state's call of the policy raised (``failure`` says which)."""

    def __init__(self, failure: PolicyFailure) -> None:
        super().__init__(f"the policy's {failure.call.what} for workers {list(failure.call.workers)} raised "
                         f"{failure.summary}")
        self.failure = failure


class _Job:
    """Work the sampler hands to the serving thread (:meth:`ActionServer.apply_agent_update`,
    :meth:`ActionServer.restart_slot`): taken (``started``) and run (``done``: ``result`` or
    ``error`` set) by it. ``what``: the call of the policy it is recorded as (``call``, for
    ``workers``); None for work that is no call of the policy's itself, whose calls of the policy
    (the pool's moves of slot state) are recorded each on its own."""

    def __init__(self, run: Callable[[], Any], what: str | None, workers: Sequence[int]) -> None:
        self.run = run
        self.what = what
        self.workers = tuple(workers)
        self.started = threading.Event()
        self.done = threading.Event()
        self.call: ServerCall | None = None
        self.result: Any = None
        self.error: BaseException | None = None


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
        self.view.header[GAVE_UP] = 0
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

    def abandon(self) -> None:
        """Remove the segment's name but keep it mapped for the life of the process (a thread that
        did not stop may still touch it); drop the semaphores (their names go when they are freed)."""
        _keep_mapped(self.shm)
        try:
            self.shm.unlink()
        except FileNotFoundError:  # pragma: no cover
            pass
        self.posted = self.answered = None

    def close(self) -> None:
        """Unmap and unlink the segment; drop the semaphores (freed when unreferenced). Only once no
        thread can touch the segment any more."""
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
            last sign of life: a worker held back for a busy one waits as long as it is busy, and
            every call of the policy starts with a sign of life to each worker waiting, so a worker
            gives up only once a call has run ``timeout`` seconds); also the bound on the sampler's
            waits for the server's lock.
        on_hold: ``on_hold(i)`` is called, a few times a second, while worker ``i``'s posted
            ``get_actions`` is held back because another worker of its group is busy.
        spin_s: seconds a worker (and the serving thread) polls for what it waits for before
            sleeping on its semaphore (see :func:`~corral.parallel.action_slot.poll_acquire`).

    Attributes:
        call: the call of the policy running now (None when none runs); read without the lock.
        last_call: the last call that returned.

    :meth:`failure_of` says, for worker ``i``, which call of the policy raised while the worker waited for
    the answer to its latest request (a move of slot state, a forward pass, a control call of its own:
    ``seed``, ``reset``, ``get_sampling_state``, ``get_param_values``, ``set_param_values``): recorded
    before the worker is answered, stamped with that request's sequence number, and dropped when the
    worker is restarted. So a worker that caught the error and went on is not taken for the policy's
    victim when it fails later for a reason of its own, nor is one whose next request the serving
    thread has not yet collected (its proxy gave up waiting for it: the server's fault, not the policy's
    call that raised before).
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
        self.pool = AgentPool(self.groups, prepare, self._inner_call)
        self.doorbell = ctx.Semaphore(0)
        self.slots: list[_ServerSlot] = []
        self.n_served_steps = 0
        #: Seconds spent answering get_actions (everything) and in the policy's forward passes alone.
        self.serve_s = 0.0
        self.forward_s = 0.0
        #: Worker requests answered by batched forward passes (sum over steps of the workers served).
        self.n_served_requests = 0
        self.call: ServerCall | None = None
        self.last_call: ServerCall | None = None
        #: For each worker, the last failure recorded while it waited, and the ``SEQ`` of the request it
        #: waited for (:meth:`failure_of`).
        self._failed: dict[int, tuple[int, PolicyFailure]] = {}
        self._stop = False
        self._abandoned = False
        self._thread: threading.Thread | None = None
        self._posts: dict[int, int] = {}
        #: The work handed to the serving thread and not yet taken (guarded by ``_handoff``).
        self._job: _Job | None = None
        self._handoff = threading.Lock()
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

    def waiting(self, i: int) -> bool:
        """True while worker ``i`` waits for an answer the server has taken up (its request is in the
        call running now, or collected and not yet answered). Read without the lock."""
        call = self.call
        return (call is not None and i in call.waiters) or i in self._posts

    def gave_up(self, i: int) -> bool:
        """True when worker ``i``'s proxy gave up waiting for the answer to its latest request (no
        sign of life from the server for ``timeout`` seconds), as its slot says: whatever words the
        worker reports the failure in. Read without the lock."""
        slots = self.slots
        return i < len(slots) and bool(slots[i].view.header[GAVE_UP])

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, waited for ``timeout`` seconds at most (:class:`ServerBusy` then)."""
        if not self.lock.acquire(timeout=self.timeout):
            raise ServerBusy(self.call, self.timeout)
        try:
            yield
        finally:
            self.lock.release()

    def restart_slot(self, i: int) -> None:
        """Worker ``i`` is being restarted: new semaphores, its pending post and state dropped.

        The serving thread does it, and this waits for it, bounded, as for an agent update (see
        :meth:`apply_agent_update`): dropping the worker's state takes it out of the policy that
        holds it (``get_sampling_state``, recorded as :attr:`call`), and a call of the policy that
        does not return must be named, never a hang of the sampler's. :class:`ServerBusy` when the
        thread has not taken it up within ``timeout`` seconds or a call of the policy it makes has run
        ``timeout`` seconds; :class:`PolicyCallFailed` when that ``get_sampling_state`` raises."""
        self._run_job(_Job(lambda: self._restart(i), None, (i,)))

    def _restart(self, i: int) -> None:
        self._posts.pop(i, None)
        self._failed.pop(i, None)
        self.slots[i].renew(self.ctx)
        self.pool.forget(i)

    def start(self) -> None:
        """Start the serving thread."""
        self._thread = threading.Thread(target=self._run, name="corral-action-server", daemon=True)
        self._thread.start()

    def ring(self) -> None:
        """Wake the serving thread (a worker's business changed)."""
        doorbell = self.doorbell
        if doorbell is not None:
            doorbell.release()

    def apply_agent_update(self, update: Any, n_workers: int) -> bool:
        """Apply an agent update to the server's policies; True when workers need a fresh proxy
        (a new Policy: they reseed their slots).

        The serving thread applies it (a call of the policy like any other: ``set_param_values`` for
        parameters, ``deepcopy`` for a new Policy, :attr:`call` while it runs) and this waits for it,
        bounded: :class:`ServerBusy` when the thread has not taken it up within ``timeout`` seconds
        (it is stuck in another call) or its call has run ``timeout`` seconds without returning. The
        update's own error is raised here (:class:`PolicyCallFailed` for a move of slot state it made)."""
        if update is None:
            return False
        if isinstance(update, list) and all(u is update[0] for u in update):
            update = update[0]
            if update is None:
                return False
        if isinstance(update, list):
            workers = [i for i, u in enumerate(update) if u is not None]
            new = any(isinstance(u, Policy) for u in update)
        else:
            workers, new = list(range(len(self.slots))), isinstance(update, Policy)
        job = _Job(lambda: self._update_pool(update), "deepcopy" if new else "set_param_values", workers)
        return bool(self._run_job(job))

    def _run_job(self, job: _Job) -> Any:
        """Run ``job`` in the serving thread and wait for it (:meth:`_hand_over`), or here, under the
        lock, when the thread is not running (not started, or closed); its result, or its error raised."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._locked():
                self._do_job(job)
        else:
            self._hand_over(job)
        if job.error is not None:
            raise job.error
        return job.result

    def _hand_over(self, job: _Job) -> None:
        """Give ``job`` to the serving thread and wait for it, each call of the policy it makes (its own
        and the pool's moves of slot state within it) ``timeout`` seconds at most, and the time between
        them as long (:class:`ServerBusy` then)."""
        with self._handoff:
            self._job = job
        self.ring()
        if not job.started.wait(self.timeout):
            with self._handoff:
                taken = self._job is not job
                self._job = None
            if not taken:  # never taken up: the thread is stuck in another call (or holds its lock)
                raise ServerBusy(self.call, self.timeout)
            job.started.wait(self.timeout)  # taken just now: started is set at once
        if job.what is not None and job.call is None:  # its call could not even be recorded: the error is the job's
            job.done.wait(self.timeout)
            return
        taken_at = time.monotonic()
        while not job.done.is_set():
            # the job's call, or a move of slot state within it (the thread runs nothing else until done)
            running = self.call or job.call
            if running is None:  # between the calls of the policy the job makes (or before the first)
                last = self.last_call
                since = max(taken_at, last.ended) if last is not None and last.ended is not None else taken_at
            else:
                since = running.started if running.ended is None else running.ended
            left = since + self.timeout - time.monotonic()
            if left <= 0:
                raise ServerBusy(running if running is not None and running.ended is None else None, self.timeout)
            job.done.wait(max(left, 0.01))

    def _take_job(self) -> _Job | None:
        with self._handoff:
            job, self._job = self._job, None
        return job

    def _do_job(self, job: _Job) -> None:
        """Run ``job`` (under the lock), recording its call when it is one of the policy's; never raises."""
        call: ServerCall | None = None
        try:
            if job.what is not None:
                call = job.call = self._begin_call(job.what, job.workers)
            job.started.set()
            job.result = job.run()
        except Exception as exc:  # noqa: BLE001 - raised in the sampler's thread
            job.error = exc
        finally:
            if call is not None:
                self._end_call(call)
            job.started.set()
            job.done.set()

    def _update_pool(self, update: Any) -> bool:
        if isinstance(update, Policy):
            self.pool.set_policy(update)
            return True
        if isinstance(update, list):
            self.pool.set_per_worker(update)
            return any(isinstance(u, Policy) for u in update)
        self.pool.set_params(update)
        return False

    def close(self, join_s: float = 5.0) -> None:
        """Stop the thread (bounded) and free every segment and semaphore. Idempotent.

        The thread is waited for ``join_s`` seconds at most (half a second once its call has run
        ``timeout`` seconds: it is stuck). A thread that has not stopped then is abandoned, never
        waited for again: it may still return from its call at any time, or never, so nothing it
        may touch is freed. The names of its segments and semaphores are removed (nothing is left
        in ``/dev/shm``), the segments stay mapped for the life of the process (:func:`_keep_mapped`),
        the lock and the policies stay as they are; the thread, once its call returns, sees that the
        server was closed and ends without touching a slot.
        """
        self._stop = True
        if self._abandoned:
            return
        thread, self._thread = self._thread, None
        if thread is not None:
            call = self.call
            if call is not None and call.seconds() >= self.timeout:
                join_s = min(join_s, _STUCK_JOIN_S)
            self.ring()
            thread.join(join_s)
            if thread.is_alive():
                self._abandon(thread)
                return
        if not self.lock.acquire(timeout=join_s):  # pragma: no cover - only the (ended) thread takes it
            self._abandon(thread)
            return
        try:
            for slot in self.slots:
                slot.close()
            self.slots = []
            self.doorbell = None
            self.pool = AgentPool(self.groups, self.pool.prepare, self._inner_call)
        finally:
            self.lock.release()

    def _abandon(self, thread: threading.Thread | None) -> None:
        self._abandoned = True
        call = self.call
        logger.debug("the action server's thread %s did not stop (%s); its %d segments stay mapped", thread,
                     f"{call.what} for workers {list(call.workers)} has run {call.seconds():.1f} s"
                     if call is not None else "in no call", len(self.slots))
        for slot in self.slots:  # the list and its slots stay: the thread may still index them
            slot.abandon()
        self.doorbell = None

    # ------------------------------------------------------------------ the serving thread
    def _run(self) -> None:
        while not self._stop:
            if not self._wait_for_posts():
                return
            with self.lock:
                if self._stop:
                    return
                try:
                    self._serve()
                except Exception:  # noqa: BLE001 - never let the thread die silently
                    if not self._stop:  # else: closed under it (abandoned); nobody waits for it any more
                        logger.exception("the action server failed")

    def _wait_for_posts(self) -> bool:
        """Sleep until the doorbell rings (or ``_IDLE_S``); False once the server is closed. The
        doorbell is not held on to while serving (an abandoned server's semaphores must be freed)."""
        doorbell = self.doorbell
        if doorbell is None:
            return False
        if not poll_acquire(doorbell, self.spin_s):
            doorbell.acquire(timeout=_IDLE_S)
        return True

    def _begin_call(self, what: str, workers: Sequence[int], waiters: Sequence[int] = ()) -> ServerCall:
        """Record a call of the policy for ``workers`` (``waiters``: others whose answer waits for it)
        (:attr:`call`; :meth:`_end_call` once it returns). It starts with a sign of life (``HELD``) to
        every worker the server owes an answer, so that a worker's proxy gives up only once this call
        (or a later one) has run ``timeout`` seconds."""
        call = self.call = ServerCall(what, workers, time.monotonic(), waiters)
        for i in call.waiters:
            self.slots[i].view.header[HELD] += 1
        for i in self._posts:
            if i not in call.waiters:
                self.slots[i].view.header[HELD] += 1
        return call

    @contextmanager
    def _inner_call(self, what: str, workers: tuple[int, ...]) -> Iterator[None]:
        """A call the pool makes to move slot state (``what`` for ``workers``) within the call running
        now: recorded as a call of its own (:attr:`call`, waited for by the same workers), after which
        the call it was made for resumes, timed afresh (each starts with a sign of life). A call that
        raises is recorded (:meth:`_record`) and raised as :class:`PolicyCallFailed`, which names it.
        Once the server is closed (a call returned after it), no further call of the policy is made:
        it raises."""
        if self._stop:
            raise RuntimeError("the action server was closed")
        outer = self.call
        inner = self._begin_call(what, workers, waiters=outer.waiters if outer is not None else ())
        try:
            yield
        except Exception as exc:
            failure = PolicyFailure.of(inner, outer, exc, moves=True)
            self._record(inner.waiters, failure)
            raise PolicyCallFailed(failure) from exc
        finally:
            if outer is None:
                self._end_call(inner)
            else:
                inner.ended = outer.started = time.monotonic()
                self.last_call = inner
                self.call = outer  # never None in between: a reader sees the one or the other
                if not self._stop:
                    for i in dict.fromkeys((*outer.waiters, *self._posts)):
                        self.slots[i].view.header[HELD] += 1
        if self._stop:
            raise RuntimeError("the action server was closed")

    @contextmanager
    def _policys_own(self, call: ServerCall, within: ServerCall | None = None) -> Iterator[None]:
        """The policy's own call for workers (``call``: a forward pass, or a control call a worker asks
        for, such as ``seed`` or ``reset``): when it raises, recorded for every worker waiting for it
        (:meth:`_record`, before they are answered with the error) and raised on. A move of slot state
        within it that raised (:class:`PolicyCallFailed`) is recorded already."""
        try:
            yield
        except PolicyCallFailed:
            raise
        except Exception as exc:
            self._record(call.waiters, PolicyFailure.of(call, within, exc, moves=False))
            raise

    def _record(self, workers: Sequence[int], failure: PolicyFailure) -> None:
        """Keep ``failure`` for each of ``workers`` (before they are answered), stamped with the sequence
        number of the request each waits for: its slot's ``SEQ``, which a worker does not write while it
        waits (see :meth:`failure_of`)."""
        for i in workers:
            self._failed[i] = (int(self.slots[i].view.header[SEQ]), failure)

    def failure_of(self, i: int) -> PolicyFailure | None:
        """The call of the policy that raised while worker ``i`` waited for the answer to its latest
        request (the one its slot's ``SEQ`` names), or None: a failure recorded for an earlier request
        (one the worker caught and went on from, or one whose next request the serving thread has not
        collected yet) belongs to that request only. Read without the lock."""
        stamped = self._failed.get(i)
        slots = self.slots
        if stamped is None or i >= len(slots) or slots[i].view.header is None:
            return None
        seq, failure = stamped
        return failure if int(slots[i].view.header[SEQ]) == seq else None

    def _end_call(self, call: ServerCall) -> None:
        call.ended = time.monotonic()
        self.last_call = call  # before call is cleared: a reader sees one or the other
        self.call = None

    def _serve(self) -> None:
        """Collect the posts and answer what can be answered. Every answer is written only if the
        server was not closed while the policy's call ran (see :meth:`close`)."""
        job = self._take_job()
        if job is not None:
            self._do_job(job)
            if self._stop:
                return
        posts = self._posts
        for slot in self.slots:
            if slot.worker_number not in posts and slot.posted.acquire(False):
                posts[slot.worker_number] = int(slot.view.header[KIND])
        for i, kind in list(posts.items()):
            if kind == GET_ACTIONS:
                continue
            del posts[i]
            if not self._answer_control(i, kind):
                return
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
            if not self._answer_actions(waiting):
                return
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

    def _answer_control(self, i: int, kind: int) -> bool:
        """Answer worker ``i``'s control request; False (nothing written) when the server was closed
        while the policy's call ran."""
        view = self.slots[i].view
        reply: Any = None
        error: str | None = None
        try:
            if kind == RESET:
                mask = self._take_reset(view)
                call = self._begin_call("reset", (i,))
                try:
                    with self._policys_own(call):
                        self._apply_reset(i, mask)
                finally:
                    self._end_call(call)
            elif kind == CALL:
                method, args = view.read_blob()
                if method not in _SERVED:
                    raise ValueError(f"the action server does not serve {method!r}")
                call = self._begin_call(str(method), (i,))
                try:
                    if method in _POLICYS_OWN:
                        with self._policys_own(call):
                            reply = self._control(i, method, args)
                    else:  # its calls of the policy are moves of slot state, recorded each on its own
                        reply = self._control(i, method, args)
                finally:
                    self._end_call(call)
            else:
                raise ValueError(f"unknown request kind {kind}")
        except Exception:  # noqa: BLE001 - reported to the worker, which reports it to the sampler
            error = traceback.format_exc()
        if self._stop:
            return False
        if kind == CALL and error is None:
            try:
                view.write_blob(reply)
            except Exception:  # noqa: BLE001 - too large: reported like the call's own failure
                error = traceback.format_exc()
        if error is not None:
            view.write_blob(error)
        view.header[STATUS] = OK if error is None else ERROR
        view.header[KIND] = 0
        self.slots[i].answered.release()
        return True

    @staticmethod
    def _take_reset(view: SlotView) -> np.ndarray | bool:
        """The reset the request carries, cleared from the slot: True (every slot of the worker), a
        copied mask, or False (none)."""
        rows = int(view.header[RESET_ROWS])
        view.header[RESET_ROWS] = 0
        if rows == -1:
            return True
        return view.mask[:rows].copy() if rows > 0 else False

    def _apply_reset(self, i: int, mask: np.ndarray | bool) -> None:
        if mask is True:
            self.pool.reset(i, None)
        elif mask is not False:
            self.pool.reset(i, mask)

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

    def _answer_actions(self, workers: list[int]) -> bool:
        """One batched forward pass for ``workers``; False (nothing written, nobody answered) when the
        server was closed while it ran."""
        t0 = time.perf_counter()
        results: Any = None
        error: str | None = None
        call: ServerCall | None = None
        try:
            observations, deterministic, resets = [], [], []
            for i in workers:  # everything read from the slots first, the policy's calls after
                view = self.slots[i].view
                resets.append(self._take_reset(view))
                # views of the slots: the pool hands the policy copies (a pass that outlives the
                # server reads arrays of its own)
                observations.append(view.read_obs())
                deterministic.append(bool(view.header[DETERMINISTIC]))
            resetting = [i for i, mask in zip(workers, resets) if mask is not False]
            if resetting:  # the resets that rode along: a call of the policy's reset of their own
                call = self._begin_call("reset", resetting, waiters=workers)
                with self._policys_own(call, ServerCall("get_actions", workers, call.started)):
                    for i, mask in zip(workers, resets):
                        self._apply_reset(i, mask)
                self._end_call(call)
                if self._stop:  # closed while the resets ran: no forward pass after them
                    return False
            call = self._begin_call("get_actions", workers)
            t1 = time.perf_counter()
            with self._policys_own(call):
                results = self.pool.get_actions(workers, observations, deterministic)
            self.forward_s += time.perf_counter() - t1
        except Exception:  # noqa: BLE001 - every waiting worker gets the error
            error = traceback.format_exc()
        finally:
            if call is not None and call.ended is None:
                self._end_call(call)
        if self._stop:
            return False
        if error is None:
            try:
                for i, (actions, infos) in zip(workers, results):
                    self.slots[i].write_response(np.asarray(actions), {k: np.asarray(v) for k, v in infos.items()})
                    self.slots[i].view.header[STATUS] = OK
                self.n_served_steps += 1
                self.n_served_requests += len(workers)
            except Exception:  # noqa: BLE001 - too large, say: every waiting worker gets the error
                error = traceback.format_exc()
        if error is not None:
            for i in workers:
                view = self.slots[i].view
                view.header[STATUS] = ERROR
                view.write_blob(error)
        for i in workers:
            self.slots[i].view.header[KIND] = 0
            self.slots[i].answered.release()
        self.serve_s += time.perf_counter() - t0
        return True


__all__ = ["ActionServer", "PolicyCallFailed", "PolicyFailure", "ServerBusy", "ServerCall"]
