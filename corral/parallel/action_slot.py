"""The shared-memory slot an action server and a worker process exchange requests through.

Both sides use it: the worker's agent proxy (:mod:`corral.parallel.action_proxy`) writes requests
and reads answers, the server (:mod:`corral.parallel.action_server`) reads requests and writes
answers. One slot per worker, with one semaphore pair (``posted``, ``answered``).

A slot is one POSIX shared-memory segment (``corral_<pid>_...``, so leaks are attributable) laid
out as :class:`SlotLayout`: an int64 header, a blob area for pickled control messages, a meta area
describing the response arrays, the observation area and the response area. Observations and
actions travel as raw array bytes; nothing is pickled per step.

Waiting: a worker first polls its ``answered`` semaphore for up to ``spin_s`` seconds, giving the
CPU away between polls (:func:`poll_acquire`), and only then sleeps on it. A sleeping worker has
to be woken by the server, and a woken process often takes the CPU from the server before it has
woken the next worker; a worker that polls is answered without either. The server polls its
doorbell the same way. While the server holds a posted ``get_actions`` back (another worker of the
group is still stepping), it bumps the header's ``HELD`` counter a few times a second, and it
bumps it once for each waiting worker when a call of its policy starts, so a sleeping worker can
tell a server that waits for someone else, or has just started its answer, from one that is gone
(the worker gives up only once one call has run ``timeout`` seconds).
"""

from __future__ import annotations

import os
import pickle
import secrets
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Sequence

import numpy as np

from corral.parallel.shared_memory import segment_prefix

# Request kinds (header[KIND]).
IDLE, GET_ACTIONS, RESET, CALL = 0, 1, 2, 3
# Header fields.
KIND, SEQ, OBS_CHAR, OBS_NDIM = 0, 1, 2, 3
OBS_SHAPE = 4  # 8 entries: 4..11
MAX_NDIM = 8
RESET_ROWS, BLOB_LEN, STATUS, META_VERSION, DETERMINISTIC, META_LEN = 12, 13, 14, 15, 16, 17
#: Bumped by the server while it holds the worker's posted request back for a busy worker of its
#: group: the waiting worker reads it as "the server is alive and waiting for someone else".
HELD = 18
#: Set (1) by the worker's proxy when it gives up waiting for the answer to its request (its
#: ``TimeoutError``), cleared by its next request: the sampler reads it, rather than the text of the
#: error the worker reports, as "this worker's failure is its wait for the server running out".
GAVE_UP = 19
HEADER_FIELDS = 32
# Response status (header[STATUS]).
OK, ERROR = 0, 1


#: Gives the CPU to another runnable process (Windows has no sched_yield: there a zero sleep, which
#: at least lets other threads run).
_yield_cpu = getattr(os, "sched_yield", lambda: time.sleep(0))


def poll_acquire(semaphore: Any, spin_s: float) -> bool:
    """Take ``semaphore`` if it is released within ``spin_s`` seconds, polling without sleeping on
    it and yielding the CPU between polls (so a process that has work to do runs first). False if
    it was not: the caller then sleeps on it as usual."""
    if semaphore.acquire(False):
        return True
    end = time.perf_counter() + spin_s
    while time.perf_counter() < end:
        _yield_cpu()
        if semaphore.acquire(False):
            return True
    return False


def _align(n: int, to: int = 64) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class SlotLayout:
    """Where each area of a slot lies (byte offsets) and how large it is."""

    name: str
    max_rows: int
    blob_bytes: int
    meta_bytes: int
    obs_bytes: int
    resp_bytes: int

    @property
    def mask_offset(self) -> int:
        """Piggy-backed reset mask (``max_rows`` bools)."""
        return _align(8 * HEADER_FIELDS)

    @property
    def blob_offset(self) -> int:
        """Pickled control request / reply."""
        return _align(self.mask_offset + self.max_rows)

    @property
    def meta_offset(self) -> int:
        """Pickled description of the response arrays."""
        return _align(self.blob_offset + self.blob_bytes)

    @property
    def obs_offset(self) -> int:
        """Observation bytes."""
        return _align(self.meta_offset + self.meta_bytes)

    @property
    def resp_offset(self) -> int:
        """Actions and agent-info bytes."""
        return _align(self.obs_offset + self.obs_bytes)

    @property
    def size(self) -> int:
        """Bytes of the whole segment (sparse: only touched pages use memory)."""
        return _align(self.resp_offset + self.resp_bytes)

    @classmethod
    def create(cls, obs_bytes: int, resp_bytes: int, blob_bytes: int = 1 << 20, meta_bytes: int = 1 << 16,
               max_rows: int = 1 << 14) -> tuple["SlotLayout", shared_memory.SharedMemory]:
        """A new segment with this layout (named after this process), and its layout."""
        name = f"{segment_prefix()}slot_{secrets.token_hex(6)}"
        layout = cls(name, max_rows, blob_bytes, meta_bytes, obs_bytes, resp_bytes)
        shm = shared_memory.SharedMemory(name=name, create=True, size=layout.size)
        return layout, shm


class SlotView:
    """numpy views of one slot's areas over a mapped buffer (either side)."""

    def __init__(self, layout: SlotLayout, buffer: Any) -> None:
        self.layout = layout
        self.buffer = buffer
        self.header = np.ndarray((HEADER_FIELDS,), dtype=np.int64, buffer=buffer, offset=0)
        self.mask = np.ndarray((layout.max_rows,), dtype=np.bool_, buffer=buffer, offset=layout.mask_offset)
        self.blob = np.ndarray((layout.blob_bytes,), dtype=np.uint8, buffer=buffer, offset=layout.blob_offset)
        self.meta = np.ndarray((layout.meta_bytes,), dtype=np.uint8, buffer=buffer, offset=layout.meta_offset)
        #: Set (in the worker's process) once a proxy gave up waiting for an answer in this slot: what it
        #: said. The answer may still come, and would be taken for the next request's, so no request
        #: follows (:meth:`~corral.parallel.action_proxy.ActionProxy._roundtrip`).
        self.abandoned: str | None = None

    # ------------------------------------------------------------------ observations
    def write_obs(self, obs: np.ndarray) -> None:
        """Store an observation batch (dtype, shape and bytes)."""
        obs = np.ascontiguousarray(obs)
        if obs.ndim > MAX_NDIM or obs.dtype.hasobject:
            raise TypeError(f"the action server takes numeric observations of at most {MAX_NDIM} dimensions, "
                            f"got {obs.dtype} with shape {obs.shape}")
        if obs.nbytes > self.layout.obs_bytes:
            raise ValueError(f"an observation batch of {obs.nbytes} bytes does not fit the action server's slot "
                             f"({self.layout.obs_bytes} bytes); raise sampler.slot_mib")
        h = self.header
        h[OBS_CHAR] = ord(obs.dtype.char)
        h[OBS_NDIM] = obs.ndim
        h[OBS_SHAPE : OBS_SHAPE + obs.ndim] = obs.shape
        np.ndarray(obs.shape, dtype=obs.dtype, buffer=self.buffer, offset=self.layout.obs_offset)[...] = obs

    def read_obs(self) -> np.ndarray:
        """The observation batch last written (a view)."""
        h = self.header
        ndim = int(h[OBS_NDIM])
        shape = tuple(int(x) for x in h[OBS_SHAPE : OBS_SHAPE + ndim])
        return np.ndarray(shape, dtype=np.dtype(chr(int(h[OBS_CHAR]))), buffer=self.buffer,
                          offset=self.layout.obs_offset)

    # ------------------------------------------------------------------ blobs
    def write_blob(self, obj: Any) -> None:
        """Pickle ``obj`` into the blob area."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.layout.blob_bytes:
            raise ValueError(f"a control message of {len(data)} bytes does not fit the action server's slot "
                             f"({self.layout.blob_bytes} bytes)")
        self.blob[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.header[BLOB_LEN] = len(data)

    def read_blob(self) -> Any:
        """Unpickle the blob area."""
        return pickle.loads(self.blob[: int(self.header[BLOB_LEN])].tobytes())

    # ------------------------------------------------------------------ responses
    def response_views(self, meta: Sequence[tuple[Any, str, tuple[int, ...], int]]) -> list[np.ndarray]:
        """Views of the response arrays described by ``meta`` ((key, dtype, shape, offset) each)."""
        base = self.layout.resp_offset
        return [np.ndarray(shape, dtype=np.dtype(dt), buffer=self.buffer, offset=base + off)
                for _, dt, shape, off in meta]

    def release(self) -> None:
        """Drop the views (before the buffer is closed)."""
        self.header = self.mask = self.blob = self.meta = None  # type: ignore[assignment]
        self.buffer = None


def response_meta(actions: np.ndarray, infos: dict[str, np.ndarray], capacity: int
                  ) -> tuple[tuple[Any, str, tuple[int, ...], int], ...]:
    """Describe where ``actions`` and each info array go in a response area of ``capacity`` bytes."""
    meta = []
    offset = 0
    for key, value in (("\0actions", actions), *infos.items()):
        value = np.asarray(value)
        meta.append((key, value.dtype.str, tuple(value.shape), offset))
        offset = _align(offset + value.nbytes)
    if offset > capacity:
        raise ValueError(f"actions and agent infos of {offset} bytes do not fit the action server's slot "
                         f"({capacity} bytes); raise sampler.slot_mib")
    return tuple(meta)


__all__ = ["SlotLayout", "SlotView", "poll_acquire", "response_meta"]
