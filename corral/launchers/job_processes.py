"""The processes of a sweep job that runs on this machine: what its own process needs before the job,
and what a job whose process died leaves running.

**The job's process.** ``hydra/launcher=joblib`` runs each job in a loky worker process, where
``multiprocessing``'s default start method is loky's own (``loky``). Every process the job then
started with ``spawn`` or ``forkserver`` (``sampler=multiprocessing``'s workers, by default) read that
method back in its own interpreter and died at start with ``ValueError: cannot find context for
'loky'``, so ``sampler=multiprocessing`` failed in every job. :func:`run_in_job_process` gives the job
the platform's default start method, as a job that ``train.py`` runs on its own has.

**What a dead job leaves.** When a job's process dies (the out-of-memory killer's SIGKILL, a crash,
``os._exit()``, the launcher's own kill past ``hydra.launcher.timeout``), the processes it started
are handed to init, out of the launcher's reach by parentage. corral's sampler workers notice and
exit within a second (their watchdog in :mod:`corral.parallel.worker_process`), and gymnasium's
AsyncVectorEnv processes when their pipe breaks, but a process the job's environment started (a
simulator's server, say) or one stuck in native code ran on after the sweep had ended. So a
launcher gives each job's process a *mark*, an environment variable that every process it starts
inherits, forked or executed, whatever its parent becomes later; once the job's process is gone,
:func:`end_leftovers` ends every process that still carries the mark (SIGTERM, then SIGKILL after
:data:`LEFTOVER_GRACE_S`) and removes the ``/dev/shm`` segments named after them and after the job's
process (corral names its segments after the pid that made them,
:func:`corral.parallel.shared_memory.segment_prefix`), which would otherwise stay until the sweep
ended and then be reported as leaked by ``multiprocessing``'s resource tracker.
"""

from __future__ import annotations

import os
import secrets
from typing import Any, Callable, Iterable, Mapping

from corral.parallel.process_tree import kill_processes
from corral.parallel.shared_memory import segment_prefix

#: The environment variable that marks a job's process and every process it starts (joblib launcher).
MARK_VAR = "CORRAL_JOB_MARK"
#: Seconds the processes a dead job left get after SIGTERM, before SIGKILL.
LEFTOVER_GRACE_S = 2.0
#: Where POSIX shared memory segments are.
SHM_DIR = "/dev/shm"


def new_mark() -> str:
    """A mark no other job's process has: this process's pid and a random token."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def run_in_job_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a job's process that a launcher started as a child of its own (a loky worker),
    with ``multiprocessing``'s default start method the platform's, not loky's (see the module
    docstring)."""
    import multiprocessing

    if multiprocessing.get_start_method(allow_none=True) not in (None, *multiprocessing.get_all_start_methods()):
        multiprocessing.set_start_method(None, force=True)  # the platform's default again, on first use
    return fn(*args)


def environment_of(pid: int) -> set[bytes] | None:
    """The ``NAME=value`` entries of the environment ``pid`` started with (``/proc/<pid>/environ``:
    a forked child's is its parent's), or None when it cannot be read (gone, another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return set(f.read().split(b"\0"))
    except OSError:
        return None


def marked_processes(entries: Mapping[str, str]) -> set[int]:
    """The processes (this one left out) whose environment holds every ``NAME=value`` of ``entries``."""
    wanted = {f"{name}={value}".encode() for name, value in entries.items()}
    try:
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:  # no /proc: nothing to find
        return set()
    found = set()
    for pid in pids:
        if pid != os.getpid():
            environ = environment_of(pid)
            if environ is not None and wanted <= environ:  # a zombie's is empty
                found.add(pid)
    return found


def remove_segments(pids: Iterable[int]) -> list[str]:
    """Remove the ``/dev/shm`` segments corral's code made in the processes ``pids`` (named
    ``corral_<pid>_...``), which are gone; each is also taken off this process's ``multiprocessing``
    resource tracker, which a loky job's processes share, so that it does not report them as leaked
    when the sweep ends. Returns the names removed."""
    prefixes = tuple(segment_prefix(pid) for pid in pids)
    try:
        names = [name for name in os.listdir(SHM_DIR) if prefixes and name.startswith(prefixes)]
    except OSError:
        return []
    removed = []
    for name in names:
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except OSError:  # gone meanwhile
            continue
        removed.append(name)
    if removed:
        try:
            from multiprocessing import resource_tracker

            for name in removed:  # registered first, so the tracker never reads an unknown name
                resource_tracker.register(f"/{name}", "shared_memory")
                resource_tracker.unregister(f"/{name}", "shared_memory")
        except Exception:  # noqa: BLE001 - no tracker to tell (Windows, a tracker that cannot start)
            pass
    return removed


def end_leftovers(entries: Mapping[str, str], pids: Iterable[int] = (), grace_s: float = LEFTOVER_GRACE_S) -> set[int]:
    """End what a job whose process is gone left running: every process whose environment still holds
    ``entries`` (the job's mark) gets SIGTERM, and SIGKILL after ``grace_s`` seconds; then the
    ``/dev/shm`` segments named after ``pids`` (the job's process) and after the ended processes are
    removed (:func:`remove_segments`). Bounded; returns the pids still running after that."""
    left = marked_processes(entries)
    running = kill_processes(left, grace_s) if left else set()
    remove_segments((set(pids) | left) - running)
    return running


__all__ = ["LEFTOVER_GRACE_S", "MARK_VAR", "end_leftovers", "environment_of", "marked_processes", "new_mark",
           "remove_segments", "run_in_job_process"]
