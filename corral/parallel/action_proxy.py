"""The worker side of an action server: the agent proxy and the endpoint it reaches the server by.

Under ``sampler=action_server`` (and ``alternating``) a worker process steps its environments with
an :class:`ActionProxy` as its agent. The proxy implements the :class:`~corral.framework.policy.Policy`
calls a worker makes (``get_actions``, ``reset``, ``seed``, ``deterministic``,
``get_sampling_state`` / ``set_sampling_state``, ``get_param_values``) by writing the request into
the worker's shared-memory slot (:mod:`corral.parallel.action_slot`), releasing the slot's
``posted`` semaphore (and the server's doorbell), and waiting on the slot's ``answered`` semaphore
(polling first, :func:`~corral.parallel.action_slot.poll_acquire`): one semaphore pair per worker.
The policy itself lives in the sampler's process (:mod:`corral.parallel.action_server`).

A reset that precedes a ``get_actions`` call (what every worker does) rides along with that call,
so it costs no round trip of its own.
"""

from __future__ import annotations

import mmap
import os
import pickle
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Sequence

import numpy as np

from corral.framework.policy import Policy
from corral.parallel.action_slot import (
    CALL,
    DETERMINISTIC,
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

try:  # POSIX: map segments without registering them with this process's resource tracker.
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None


#: Methods the proxy forwards to the server; a worker whose agent needs more cannot run under an action server.
PROXY_METHODS = frozenset({
    "get_actions", "get_action", "reset", "seed", "deterministic", "recurrent", "get_sampling_state",
    "set_sampling_state", "get_param_values", "set_param_values",
})


# ---------------------------------------------------------------------- worker side
#: How the proxy's TimeoutError starts when the server gave no sign of life for ``timeout`` seconds
#: (the sampler tells it apart from a worker's own failure: the server may be the one at fault).
NO_ANSWER = "the action server did not answer worker"


@dataclass
class ProxyEndpoint:
    """What a worker process needs to reach the server: its slot and semaphores (inherited at start)."""

    worker_number: int
    layout: SlotLayout
    posted: Any
    answered: Any
    doorbell: Any
    timeout: float
    spin_s: float = 0.0


_ENDPOINT: ProxyEndpoint | None = None
_SLOT: SlotView | None = None


def _map_slot(layout: SlotLayout) -> SlotView:
    """Map a slot read-write without handing it to this process's resource tracker."""
    if _posixshmem is None:  # pragma: no cover - Windows
        shm = shared_memory.SharedMemory(name=layout.name)
        return SlotView(layout, shm.buf)
    fd = _posixshmem.shm_open("/" + layout.name, os.O_RDWR, mode=0o600)
    try:
        mm = mmap.mmap(fd, layout.size)
    finally:
        os.close(fd)
    return SlotView(layout, mm)


def install_endpoint(endpoint: ProxyEndpoint) -> None:
    """Make ``endpoint`` the one :class:`ActionProxy` objects of this process connect to."""
    global _ENDPOINT, _SLOT
    _ENDPOINT = endpoint
    _SLOT = _map_slot(endpoint.layout)


@dataclass
class ServedWorkerFactory:
    """A :class:`~corral.framework.worker.WorkerFactory` plus worker ``i``'s endpoint: started as a
    worker process's factory, it installs the endpoint there before building the worker."""

    factory: Any
    endpoint: ProxyEndpoint

    def __call__(self, worker_number: int, restart: int = 0) -> Any:
        """Install the endpoint, then build the worker."""
        install_endpoint(self.endpoint)
        return self.factory(worker_number, restart=restart)


class ActionServerError(RuntimeError):
    """The action server failed to answer a request (its message carries the server's traceback)."""


def _connected_proxy(worker_number: int, recurrent: bool, deterministic: bool = False) -> "ActionProxy":
    proxy = ActionProxy(worker_number, recurrent, deterministic=deterministic)
    if _SLOT is not None:  # numbered on from the slot's last request (see ActionProxy._seq)
        proxy._seq = int(_SLOT.header[SEQ])
    return proxy


class ActionProxy(Policy):
    """The agent of a worker under an action server: every call goes to the server's policy.

    Built in the sampler's process and sent to the worker like a Policy; unpickled in the worker
    process it connects to that process's endpoint (or to ``endpoint`` when given, for a worker
    served in the server's own process). Anything a worker asks of its agent beyond
    :data:`PROXY_METHODS` is an AttributeError naming the sampler to use instead.
    """

    def __init__(self, worker_number: int, recurrent: bool = False, endpoint: ProxyEndpoint | None = None,
                 deterministic: bool = False) -> None:
        self.worker_number = worker_number
        self._endpoint = endpoint  # None: this process's installed endpoint
        self._own_slot: SlotView | None = None
        self.recurrent = recurrent
        self._deterministic = bool(deterministic)  # the served policy's mode (evaluation sends a deterministic one)
        self._pending_reset: np.ndarray | None = None
        #: The sequence number of this proxy's latest request, in its slot's ``SEQ``. A proxy connecting to a
        #: slot numbers on from the slot's (a new agent's proxy, a restarted worker's), so that each request
        #: a slot carries has a number of its own: the server's failure records go by it
        #: (:meth:`~corral.parallel.action_server.ActionServer.failure_of`).
        self._seq = 0
        self._meta_version = -1
        self._views: list[np.ndarray] = []
        self._keys: list[str] = []

    def __reduce__(self) -> Any:
        return (_connected_proxy, (self.worker_number, self.recurrent, self._deterministic))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"the worker's agent is an action-server proxy, which has no {name!r}: under sampler=action_server "
            f"or alternating a worker's agent supports only {sorted(PROXY_METHODS)}; use sampler=multiprocessing "
            "for this worker"
        )

    # ------------------------------------------------------------------ transport
    def _slot(self) -> tuple[SlotView, ProxyEndpoint]:
        if self._endpoint is not None:
            if self._own_slot is None:
                self._own_slot = _map_slot(self._endpoint.layout)
                self._seq = int(self._own_slot.header[SEQ])
            return self._own_slot, self._endpoint
        if _SLOT is None or _ENDPOINT is None:
            raise RuntimeError("an ActionProxy works only in a worker process started by an action-server sampler")
        return _SLOT, _ENDPOINT

    def _roundtrip(self, slot: SlotView, ep: ProxyEndpoint, kind: int) -> None:
        if slot.abandoned is not None:
            raise ActionServerError(slot.abandoned)
        self._seq += 1
        slot.header[SEQ] = self._seq
        slot.header[GAVE_UP] = 0
        slot.header[KIND] = kind
        ep.posted.release()
        ep.doorbell.release()
        if not poll_acquire(ep.answered, ep.spin_s):  # most answers come while polling: nothing more per step
            try:
                self._sleep_until_answered(slot, ep)
            except TimeoutError as exc:
                slot.abandoned = (
                    f"worker {ep.worker_number} asked the action server again after its proxy gave up waiting for "
                    f"an answer ({exc}); that answer may still come and would be taken for the new request's, so "
                    "the slot serves no further request: let the worker fail on the TimeoutError (the sampler "
                    "then names the call that did not return; with on_worker_failure=restart it rebuilds the "
                    "worker) instead of catching it and going on")
                raise
        if slot.header[STATUS] != OK:
            raise ActionServerError(f"the action server failed to serve worker {ep.worker_number}:\n"
                                    f"{slot.read_blob()}")

    @staticmethod
    def _sleep_until_answered(slot: SlotView, ep: ProxyEndpoint) -> None:
        """Sleep on the answer in bounded waits: exit if the sampler's process is gone; give up after
        ``ep.timeout`` seconds without a sign of life from the server.

        While the server holds this request back because another worker of the group is still
        stepping, it bumps the slot's ``HELD`` counter: that wait is the other worker's, which the
        sampler times out (and names) itself, so it never runs down this worker's clock. The server
        bumps it, too, whenever it starts a call of its policy while this worker waits: so this
        worker gives up only once a call of the server's has run ``timeout`` seconds (the sampler
        then names that call, not this worker). Giving up sets the slot's ``GAVE_UP``, which the
        sampler reads (the worker may report the error in words of its own).
        """
        deadline = time.monotonic() + ep.timeout
        held = int(slot.header[HELD])
        parent = os.getppid()
        while not ep.answered.acquire(timeout=min(1.0, ep.timeout / 4)):
            if os.getppid() != parent:
                os._exit(1)  # the sampler's process is gone
            now = time.monotonic()
            if int(slot.header[HELD]) != held:
                held = int(slot.header[HELD])
                deadline = now + ep.timeout
            elif now > deadline:
                slot.header[GAVE_UP] = 1  # what the sampler goes by, however the worker reports the error
                raise TimeoutError(f"{NO_ANSWER} {ep.worker_number} within {ep.timeout:g} s")

    def _call(self, method: str, *args: Any) -> Any:
        slot, ep = self._slot()
        self._flush_reset(slot, ep)
        slot.write_blob((method, args))
        self._roundtrip(slot, ep, CALL)
        return slot.read_blob()

    def _flush_reset(self, slot: SlotView, ep: ProxyEndpoint) -> None:
        if self._pending_reset is None:
            return
        self._write_reset(slot)
        self._roundtrip(slot, ep, RESET)

    def _write_reset(self, slot: SlotView) -> None:
        mask, self._pending_reset = self._pending_reset, None
        if mask is None:
            slot.header[RESET_ROWS] = 0
        elif mask.ndim == 0:  # reset(None): every slot
            slot.header[RESET_ROWS] = -1
        else:
            slot.mask[: len(mask)] = mask
            slot.header[RESET_ROWS] = len(mask)

    # ------------------------------------------------------------------ the Policy calls
    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Post the batch, wait for the server's actions (copies, safe to keep)."""
        slot, ep = self._slot()
        slot.write_obs(np.asarray(observations))
        self._write_reset(slot)
        slot.header[DETERMINISTIC] = int(self._deterministic)
        self._roundtrip(slot, ep, GET_ACTIONS)
        version = int(slot.header[META_VERSION])
        if version != self._meta_version:
            meta = pickle.loads(slot.meta[: int(slot.header[META_LEN])].tobytes())
            self._views = slot.response_views(meta)
            self._keys = [m[0] for m in meta]
            self._meta_version = version
        views = self._views
        return views[0].copy(), {k: v.copy() for k, v in zip(self._keys[1:], views[1:])}

    def reset(self, dones: np.ndarray | None = None) -> None:
        """Start new episodes in the masked slots (sent with the next request)."""
        slot, ep = self._slot()
        if self._pending_reset is not None:
            self._flush_reset(slot, ep)
        self._pending_reset = np.array(True) if dones is None else np.asarray(dones, dtype=bool).copy()

    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        """The server gives this worker's slots these noise streams."""
        self._pending_reset = None  # seeding starts every slot afresh
        self._call("seed", list(seeds))

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        """Evaluation mode for this worker's slots (sent with every request)."""
        return self._deterministic

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        self._deterministic = bool(value)

    def get_sampling_state(self) -> dict[str, Any]:
        """This worker's rows of the server policy's sampling state."""
        return self._call("get_sampling_state")

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore this worker's rows."""
        self._pending_reset = None
        self._call("set_sampling_state", state)

    def get_param_values(self) -> dict[str, np.ndarray]:
        """The parameters of the server's policy for this worker."""
        return self._call("get_param_values")

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Serve this worker with these parameters (samplers send parameters to the server directly)."""
        self._call("set_param_values", params)


__all__ = [
    "ActionProxy", "ActionServerError", "NO_ANSWER", "PROXY_METHODS", "ProxyEndpoint", "ServedWorkerFactory",
    "SlotLayout", "SlotView", "install_endpoint", "poll_acquire", "response_meta",
]
