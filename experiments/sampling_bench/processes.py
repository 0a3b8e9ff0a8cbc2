"""The benchmark's view of processes: CPU time from /proc, what a run started and left running, the
Ray runtime it starts, and the machine it ran on."""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable

import numpy as np

from .settings import RAY_NUM_CPUS

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds (user + system, all threads)) of every process (Linux /proc)."""
    table: dict[int, tuple[int, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            table[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK)
        except (IndexError, ValueError):
            continue
    return table


def _descendants(table: dict[int, tuple[int, float]], root: int) -> set[int]:
    """Every process below ``root`` in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _is_stdlib_helper(pid: int, table: dict[int, tuple[int, float]]) -> bool:
    """multiprocessing's resource tracker or forkserver (children of this process that exit with
    it); the forkserver's own children (AsyncVectorEnv processes) are not helpers."""
    if table.get(pid, (0, 0.0))[0] != os.getpid():
        return False
    cmd = _cmdline(pid)
    return "multiprocessing.resource_tracker" in cmd or "multiprocessing.forkserver" in cmd


def _is_ray_process(pid: int) -> bool:
    cmd = _cmdline(pid)
    return cmd.startswith("ray::") or "/ray/" in cmd or "raylet" in cmd or "gcs_server" in cmd


def start_ray(log: Callable[[str], None] = print) -> Any:
    """One local Ray runtime for the whole run (every RaySampler reuses it); returns the module."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    t0 = time.perf_counter()
    # address="local": always a new runtime of our own, never someone else's `ray start` cluster.
    ray.init(address="local", num_cpus=RAY_NUM_CPUS, include_dashboard=False, configure_logging=False)
    log(f"Ray runtime started in {time.perf_counter() - t0:.1f} s (not measured)")
    return ray


def leftovers(wait_s: float = 15.0) -> list[str]:
    """Processes started by this run that are still running (after waiting up to ``wait_s``), and
    this process's shared-memory segments; multiprocessing's own helpers (resource tracker,
    forkserver), which exit with this process, do not count."""
    deadline = time.monotonic() + wait_s
    while True:
        table = _proc_table()
        alive = sorted(p for p in _descendants(table, os.getpid()) if not _is_stdlib_helper(p, table))
        try:
            from corral.parallel.shared_memory import segment_prefix

            prefix = segment_prefix()
            segments = sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
        except (ImportError, OSError):
            segments = []
        if (not alive and not segments) or time.monotonic() > deadline:
            return [f"pid {p}: {_cmdline(p)[:120]}" for p in alive] + [f"/dev/shm/{s}" for s in segments]
        time.sleep(0.5)


def machine_info() -> str:
    """CPU count, load, Python, torch, gymnasium and numpy versions."""
    import gymnasium
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"machine: {platform.machine()} {platform.system()}, cpu_count={os.cpu_count()}, "
            f"python {platform.python_version()}, torch {torch.__version__} (threads={torch.get_num_threads()}), "
            f"gymnasium {gymnasium.__version__}, numpy {np.__version__}, load average {load}")
