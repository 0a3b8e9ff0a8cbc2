"""Pickled objects in shared memory: written once by one process, read by many.

A sampler that broadcasts an agent update to ``n`` worker processes pickles it once, writes the
bytes once into a POSIX shared-memory segment (:class:`SharedBlobs`), and sends each worker only a
:class:`BlobRef` (segment name, offset, size). A worker reads the object with :func:`load_blob`
without registering the segment with its own ``multiprocessing`` resource tracker (which would
otherwise unlink, or warn about, a segment the writer still owns).

Segments are named ``corral_<writer pid>_<n>_<token>`` (:func:`segment_prefix`), so a leak is
easy to attribute; the writer unlinks them, and its resource tracker unlinks them if it dies.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Sequence

try:  # POSIX: read segments without touching the resource tracker.
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

_counter = itertools.count()


def segment_prefix(pid: int | None = None) -> str:
    """Name prefix of the segments created by process ``pid`` (default: this process)."""
    return f"corral_{os.getpid() if pid is None else pid}_"


@dataclass(frozen=True)
class BlobRef:
    """Where one pickled object lies: ``size`` bytes at ``offset`` in segment ``name``."""

    name: str
    offset: int
    size: int


class SharedBlobs:
    """One shared-memory segment holding several pickled objects back to back.

    ``SharedBlobs(blobs)`` creates the segment and copies each blob in once; ``refs[k]`` locates
    ``blobs[k]``. Identical blobs (the same ``bytes`` object, as for a broadcast) are stored once.
    :meth:`unlink` frees the segment (idempotent).
    """

    def __init__(self, blobs: Sequence[bytes]) -> None:
        offsets: dict[int, int] = {}
        layout: list[tuple[int, int]] = []
        total = 0
        for blob in blobs:
            key = id(blob)
            if key not in offsets:
                offsets[key] = total
                total += len(blob)
            layout.append((offsets[key], len(blob)))
        name = f"{segment_prefix()}{next(_counter)}_{secrets.token_hex(4)}"
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            name=name, create=True, size=max(total, 1)
        )
        self.name = self._shm.name
        written: set[int] = set()
        buf = self._shm.buf
        assert buf is not None  # SharedMemory.buf is None only after close()
        for blob, (offset, size) in zip(blobs, layout):
            if id(blob) not in written:
                written.add(id(blob))
                buf[offset : offset + size] = blob
        self.refs = [BlobRef(self.name, offset, size) for offset, size in layout]
        self.nbytes = total

    def unlink(self) -> None:
        """Close and remove the segment (readers that already mapped it are unaffected)."""
        shm, self._shm = self._shm, None
        if shm is None:
            return
        shm.close()
        try:
            shm.unlink()
        except FileNotFoundError:  # pragma: no cover - removed by someone else
            pass


def dump_blob(obj: Any) -> bytes:
    """Pickle ``obj`` once (highest protocol) for :class:`SharedBlobs` or for sending inline."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def load_blob(ref: BlobRef | bytes) -> Any:
    """Unpickle an object from a :class:`BlobRef` (or from inline ``bytes``)."""
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return pickle.loads(ref)
    if _posixshmem is None:  # pragma: no cover - Windows has no resource tracker to upset
        shm = shared_memory.SharedMemory(name=ref.name)
        try:
            with shm.buf[ref.offset : ref.offset + ref.size] as view:  # type: ignore[index]  # open: not None
                return pickle.loads(view)
        finally:
            shm.close()
    fd = _posixshmem.shm_open("/" + ref.name, os.O_RDONLY, mode=0o600)
    try:
        mm = mmap.mmap(fd, ref.offset + ref.size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        with memoryview(mm) as whole, whole[ref.offset : ref.offset + ref.size] as view:
            return pickle.loads(view)
    finally:
        mm.close()


__all__ = ["BlobRef", "SharedBlobs", "dump_blob", "load_blob", "segment_prefix"]
