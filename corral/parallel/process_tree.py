"""The processes this machine runs, read from ``/proc``: each one's parent and state, whether a pid
still runs, the tree of processes below some pids, and stopping a set of them within a bound.

Shared by the samplers that must leave nothing running (a Ray runtime whose shutdown hangs, or whose
start Ctrl-C cut short) and by :mod:`corral.testing.processes`, whose leak checks ask the same
questions. Where there is no ``/proc`` the table is empty and only :func:`os.kill` answers.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Collection, Iterable


def proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(rest[1]), rest[0]


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process in /proc (empty where there is none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    out = {}
    for entry in entries:
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:  # gone meanwhile otherwise
                out[int(entry)] = stat
    return out


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # not ours to signal: it runs
        return True
    stat = proc_stat(pid)
    if stat is None:  # gone since the kill, or no /proc to ask (then the kill's answer stands)
        return not os.path.isdir("/proc")
    return stat[1] != "Z"


def descendants(pid: int) -> set[int]:
    """Every live (not zombie) process whose parent chain reaches ``pid`` (``pid`` not included)."""
    return process_tree([pid]) - {pid}


def process_tree(roots: Iterable[int]) -> set[int]:
    """The live (not zombie) processes among ``roots`` and every live process descending from them.
    Collect a tree before killing any of it: the children of a killed process are handed to another
    parent, out of reach."""
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    out: set[int] = set()
    frontier = [pid for pid in roots if pid in table]
    while frontier:
        pid = frontier.pop()
        if pid not in out:
            out.add(pid)
            frontier.extend(children.get(pid, ()))
    return {pid for pid in out if table[pid][1] != "Z"}


#: Seconds processes sent SIGKILL have to be gone before :func:`kill_processes` gives up on them.
KILL_WAIT_S = 2.0


def kill_processes(pids: Collection[int], grace_s: float) -> set[int]:
    """SIGTERM to ``pids``, up to ``grace_s`` seconds for them to exit, then SIGKILL to the rest
    (``grace_s`` 0: SIGKILL at once); bounded, the pids still running after that are returned.
    This process is never signalled."""
    left = {pid for pid in pids if pid != os.getpid()}
    steps = ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)) if grace_s > 0 else \
        ((signal.SIGKILL, KILL_WAIT_S),)
    for sig, wait_s in steps:
        for pid in left:
            try:
                os.kill(pid, sig)
            except OSError:  # gone already
                pass
        deadline = time.monotonic() + wait_s
        while True:
            left = {pid for pid in left if process_alive(pid)}
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not left:
            break
    return left


__all__ = ["KILL_WAIT_S", "descendants", "kill_processes", "proc_stat", "process_alive", "process_table", "process_tree"]
