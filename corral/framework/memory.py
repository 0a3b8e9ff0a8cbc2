"""The machine's available memory, and the check that refuses, before any process starts, a run
that would start more processes than that memory holds: the kernel's OOM killer would otherwise end
the run, trainer included, without a line."""

from __future__ import annotations

from corral.framework.errors import ConfigError


def available_memory_mib() -> float | None:
    """The memory this machine can still give processes (Linux's ``MemAvailable``), in MiB; None
    where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_room_for_processes(n: int, process_mib: float, option: str, what: str, why: str, fewer: str) -> None:
    """Raise a one-line :class:`ConfigError` when ``n`` processes of at least ``process_mib`` MiB each
    (``what``, e.g. "worker processes"; ``why`` says what each holds) cannot fit in the available
    memory; ``fewer`` is the advice that ends the line. Silent where the memory is unknown."""
    available = available_memory_mib()
    need = n * process_mib
    if available is None or need <= available:
        return
    raise ConfigError(f"{option}={n}: {n} {what} need at least {need / 1024:.1f} GiB ({process_mib:g} MiB each: "
                      f"{why}), and this machine has {available / 1024:.1f} GiB available; {fewer}")


__all__ = ["available_memory_mib", "check_room_for_processes"]
