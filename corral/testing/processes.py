"""Process and shared-memory checks for tests: what is running, what a run left behind.

Linux reads ``/proc``; elsewhere the functions fall back to what :mod:`os` and
:mod:`multiprocessing` can tell. Plugin authors use them to assert "nothing left running"
after a sampler shuts down, as corral's own contract suites do.

Tests that send signals use :func:`started_session` (a child in a session of its own, with the
default SIGINT and SIGTERM dispositions whatever this process inherited, and everything it
started stopped and its ``/dev/shm`` entries removed afterwards, even when the test fails or
times out) and :func:`interruptible` (SIGINT raises KeyboardInterrupt in this process, also when
the test suite was started in the background with SIGINT ignored).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from corral.parallel.process_tree import descendants, proc_stat, process_alive, process_table


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (first 200 characters), or ``?`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def child_processes(pid: int | None = None) -> dict[int, str]:
    """Running (not zombie) child processes of ``pid`` (default: this process): pid -> command line.

    For this process it also asks :func:`multiprocessing.active_children` (which reaps finished
    ones); the ``/proc`` scan finds the rest (``subprocess``, Ray, anything).
    """
    me = os.getpid() if pid is None else pid
    found = {}
    if me == os.getpid():
        found = {p.pid: f"multiprocessing {p.name}" for p in multiprocessing.active_children() if p.pid}
    for child, (parent, state) in process_table().items():
        if parent == me and state != "Z":
            found.setdefault(child, cmdline(child))
    return found


def wait_gone(pids: Iterable[int], timeout: float = 15.0) -> set[int]:
    """Poll until every pid has exited or ``timeout`` seconds pass; return those still alive."""
    left = set(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = {p for p in left if process_alive(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def wait_for_path(proc: subprocess.Popen, path: Path, timeout: float = 180.0) -> None:
    """Poll until ``path`` exists (a run's first snapshot, say) while ``proc`` runs; an
    AssertionError with the end of its stderr when it exits first, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            err = proc.communicate()[1] if proc.stderr is not None else ""
            raise AssertionError(f"the process exited ({proc.returncode}) before {path} existed: {(err or '')[-3000:]}")
        assert time.monotonic() < deadline, f"no {path} within {timeout:.0f} s"
        time.sleep(0.05)


def shm_entries() -> set[str]:
    """Names in ``/dev/shm`` (POSIX shared memory); empty where there is no such directory."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def processes_with_environment(entry: str) -> set[int]:
    """Live processes other than this one whose environment holds ``entry`` (``NAME=value``, as they were
    started): the processes a run started with that variable set, and all they started in turn."""
    needle = entry.encode()
    found = set()
    for pid, (_, state) in process_table().items():
        if state == "Z" or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(pid)
        except OSError:
            continue
    return found


def session_of(pid: int) -> int | None:
    """The session id of ``pid`` (from /proc), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2 :].split()[3])


def session_processes(sid: int) -> set[int]:
    """Live processes of session ``sid`` (a child started with ``start_new_session=True`` leads one)."""
    return {p for p, (_, state) in process_table().items() if state != "Z" and session_of(p) == sid}


def session_left(sid: int, timeout: float) -> set[int]:
    """Poll until session ``sid`` has no live process or ``timeout`` seconds pass; return the
    processes still in it (a sweep's jobs and what they started end some time after its leader)."""
    deadline = time.monotonic() + timeout
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def default_signal_dispositions() -> None:
    """``preexec_fn`` for a child that must react to SIGINT and SIGTERM as a terminal's program does.

    A process started in the background by a shell script inherits SIGINT *ignored*, and Python
    then installs no KeyboardInterrupt handler. Tests that send signals start their children with
    this, so they do not depend on how the test suite itself was launched.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process inside the block (Python's default handler),
    whatever disposition the process inherited; the previous one is restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


#: /dev/shm names that carry the pid of the process that created them (``{pid}`` is replaced).
SHM_PID_PATTERNS = ("sem.loky-{pid}-", "joblib_memmapping_folder_{pid}_", "corral_{pid}_")


def remove_shm_of(pids: Iterable[int], before: set[str] | None = None) -> list[str]:
    """Remove the ``/dev/shm`` entries named after ``pids`` (:data:`SHM_PID_PATTERNS`), leaving
    those in ``before``; return the names removed. For after a test killed those processes."""
    prefixes = tuple(pattern.format(pid=pid) for pid in pids for pattern in SHM_PID_PATTERNS)
    removed = []
    for name in sorted(shm_entries() - (before or set())):
        if prefixes and name.startswith(prefixes):
            path = os.path.join("/dev/shm", name)
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
                removed.append(name)
            except OSError:
                pass
    return removed


def stop_session(proc: subprocess.Popen, grace: float = 10.0, seen: Iterable[int] = ()) -> set[int]:
    """Stop ``proc`` (started with ``start_new_session=True``) and everything it started.

    SIGTERM to its session's processes and descendants, up to ``grace`` seconds for them to go,
    then SIGKILL; ``proc`` is reaped; ``/dev/shm`` entries named after any of these processes (and
    ``seen``, pids the test saw earlier) are removed. Returns the pids that were still running.
    Bounded: at most ``grace`` + 15 seconds.
    """
    pids = {proc.pid} | descendants(proc.pid) | session_processes(proc.pid)
    running = {p for p in pids if process_alive(p)}
    if proc.poll() is None:
        running.add(proc.pid)
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        running |= {p for p in descendants(proc.pid) | session_processes(proc.pid) if process_alive(p)}
        for pid in sorted(running):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        running = wait_gone(running, timeout=wait_s if sig == signal.SIGTERM else 5.0)
        if not running and proc.poll() is not None:
            break
    remove_shm_of(pids | set(seen))
    return pids


@contextmanager
def started_session(cmd: Sequence[str], **popen_kwargs: Any) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(cmd)`` in a session of its own (a signal sent with ``os.killpg`` reaches
    all of it, as Ctrl-C in a terminal reaches a foreground job), with SIGINT and SIGTERM at their
    default dispositions (:func:`default_signal_dispositions`). On leaving the block, whatever
    happened (an assertion, a timeout, Ctrl-C), :func:`stop_session` stops what is still running
    and removes its ``/dev/shm`` entries."""
    popen_kwargs.setdefault("start_new_session", True)
    proc = subprocess.Popen(list(cmd), preexec_fn=default_signal_dispositions, **popen_kwargs)
    try:
        yield proc
    finally:
        stop_session(proc)
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                stream.close()


def file_size_limit(limit: int) -> Any:
    """A ``preexec_fn`` for :mod:`subprocess` that gives the child a file size limit (``ulimit -f``),
    SIGXFSZ ignored: a write past ``limit`` bytes fails with ``OSError: [Errno 27] File too large``, as
    a write to a full disk fails, without root or a file system of its own."""
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel's signal ends the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def lines_read_in_background(proc: subprocess.Popen) -> tuple[list[str], threading.Thread]:
    """A list that a daemon thread fills with ``proc``'s output lines (its text ``stdout``, line ends
    stripped) as they come, and the thread (join it, bounded, once ``proc`` has ended). A stream closed
    under the thread (the session stopped after a failed test) ends it quietly."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
        except (OSError, ValueError):
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


__all__ = ["child_processes", "cmdline", "default_signal_dispositions", "descendants", "file_size_limit",
           "interruptible", "lines_read_in_background", "proc_stat", "process_alive", "processes_with_environment",
           "remove_shm_of", "session_left", "session_processes", "shm_entries", "started_session", "stop_session",
           "wait_for_path", "wait_gone"]
