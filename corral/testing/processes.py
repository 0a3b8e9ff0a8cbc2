"""Process and shared-memory checks for tests: what is running, what a run left behind.

Linux reads ``/proc``; elsewhere the functions fall back to what :mod:`os` and
:mod:`multiprocessing` can tell. Plugin authors use them to assert "nothing left running"
after a sampler shuts down, as corral's own contract suites do.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Iterable


def proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(rest[1]), rest[0]


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (first 200 characters), or ``?`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _parents() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) for every process in /proc."""
    out = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = proc_stat(int(entry))
                if stat is not None:
                    out[int(entry)] = stat
    return out


def child_processes(pid: int | None = None) -> dict[int, str]:
    """Running (not zombie) child processes of ``pid`` (default: this process): pid -> command line.

    For this process it also asks :func:`multiprocessing.active_children` (which reaps finished
    ones); the ``/proc`` scan finds the rest (``subprocess``, Ray, anything).
    """
    me = os.getpid() if pid is None else pid
    found = {}
    if me == os.getpid():
        found = {p.pid: f"multiprocessing {p.name}" for p in multiprocessing.active_children() if p.pid}
    for child, (parent, state) in _parents().items():
        if parent == me and state != "Z":
            found.setdefault(child, cmdline(child))
    return found


def descendants(pid: int) -> set[int]:
    """Every live (not zombie) process whose parent chain reaches ``pid``."""
    table = _parents()
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, (parent, _) in table.items() if parent in frontier} - out
        out |= frontier
    return {p for p in out if table[p][1] != "Z"}


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = proc_stat(pid)
    if stat is None:  # gone since the kill, or no /proc to ask (then the kill's answer stands)
        return not os.path.isdir("/proc")
    return stat[1] != "Z"


def wait_gone(pids: Iterable[int], timeout: float = 15.0) -> set[int]:
    """Poll until every pid has exited or ``timeout`` seconds pass; return those still alive."""
    left = set(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = {p for p in left if process_alive(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def shm_entries() -> set[str]:
    """Names in ``/dev/shm`` (POSIX shared memory); empty where there is no such directory."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


__all__ = ["child_processes", "cmdline", "descendants", "process_alive", "proc_stat", "shm_entries", "wait_gone"]
