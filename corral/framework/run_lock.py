"""One process trains in a run directory at a time.

A run holds an exclusive ``flock`` on ``<run dir>/.corral.lock`` while it trains (the file holds its
pid). A second ``train.py`` with ``trainer.resume=<that dir>`` (or a run given the same
``hydra.run.dir``) would write into the same progress.csv, snapshots and summary.json: the first run
died on a snapshot the second had moved, and summary.json ended up mixing the two. The lock is the
operating system's, so a run that was killed (even with SIGKILL) holds nothing: no stale lock to remove.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path
from typing import IO, Iterator

from corral.framework.errors import ConfigError
from corral.framework.shell_words import shell_override

#: The lock file's name in a run directory (a branch does not copy it: corral.framework.resume).
LOCK_FILE = ".corral.lock"
#: Seconds a run waits for the lock before it says the directory is in use (a check takes it briefly).
_CHECK_WINDOW_S = 1.0


def _lock(handle: IO[str]) -> bool:
    """Take the exclusive lock on ``handle`` without waiting; False when another process holds it."""
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def holder(run_dir: str | os.PathLike[str]) -> str | None:
    """The pid (as the lock file says it) of the process training in ``run_dir`` now, or ``"?"`` when
    it cannot be read; None when no process holds the directory's lock."""
    path = Path(run_dir) / LOCK_FILE
    try:
        handle = open(path)  # noqa: SIM115 - closed below; reading is enough to ask for the lock
    except OSError:
        return None
    with handle:
        if _lock(handle):
            return None  # taken and, as the file closes, released: nobody trains there
        return handle.read().strip() or "?"


def in_use_message(run_dir: str | os.PathLike[str], pid: str) -> str:
    """The one line for a run directory that another process is training in."""
    where = Path(run_dir)
    resume = shell_override("trainer.resume", where)
    return (f"{where} is in use: a corral run is training there (pid {pid}, which holds {where / LOCK_FILE}); "
            f"wait for it to finish or stop it (kill -INT {pid}), then resume it with {resume}, or "
            f"branch it into a new directory now: {resume} hydra.run.dir=<new directory>")


@contextlib.contextmanager
def training_in(run_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the block trains there (nothing without a directory: library
    use). Raises a one-line :class:`ConfigError` when another process holds it."""
    if run_dir is None:
        yield
        return
    path = Path(run_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the block, closed after it
    try:
        deadline = time.monotonic() + _CHECK_WINDOW_S
        while not (locked := _lock(handle)) and time.monotonic() < deadline:
            time.sleep(0.05)  # a command checking the directory (holder) holds the lock for an instant
        if not locked:
            handle.seek(0)
            raise ConfigError(in_use_message(run_dir, handle.read().strip() or "?"))
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock; the file stays (removing it could race with a new holder)


__all__ = ["LOCK_FILE", "holder", "in_use_message", "training_in"]
