"""The shared harness: a row's runner protocol, the context every row shares, timed loops, row and
target specs, and round-robin measurement."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from .processes import _descendants, _is_ray_process, _proc_table
from .settings import CPU_HEAVY_ID


class Runner(Protocol):
    """One row's workload, built once and measured several times.

    ``in_process``: all the work happens in this process. A row that also works in other
    processes lists them in :meth:`child_pids` (their CPU time is added to this process's);
    ``uses_ray`` rows also count the Ray runtime's own processes.
    """

    in_process: bool
    uses_ray: bool

    def run(self, budget_s: float) -> tuple[int, float, float]:
        """Work for about ``budget_s`` seconds (whole units); return (environment steps, wall-clock
        seconds, CPU seconds of this process)."""

    def child_pids(self) -> list[int]:
        """The row's own worker processes (empty for in-process rows)."""

    def close(self) -> None:
        """Free environments, samplers and processes."""


def _make_gym_env(env_id: str) -> Any:
    """``gymnasium.make(env_id)`` with its default wrappers (module level: picklable)."""
    import gymnasium as gym

    if env_id == CPU_HEAVY_ID:
        import corral.plugins.envs.cpu_heavy  # noqa: F401  (registers the id)
    return gym.make(env_id)


@dataclass
class BenchContext:
    """What every row shares: the environment, the policy recipe, the seed and the batch size."""

    env_id: str
    seed: int
    batch_size: int
    hidden_sizes: tuple[int, ...] = (64, 64)

    def make_env(self) -> Any:
        """A fresh environment (gymnasium.make with its default wrappers, as a user gets it)."""
        return _make_gym_env(self.env_id)

    def make_policy(self, n_slots: int) -> Any:
        """corral's stochastic MLP policy, seeded with one noise stream per slot."""
        import torch

        from corral.framework.env import EnvSpec
        from corral.plugins.policies.mlp import MLPPolicy

        torch.manual_seed(self.seed)
        env = self.make_env()
        policy = MLPPolicy(EnvSpec.from_env(env), hidden_sizes=self.hidden_sizes)
        env.close()
        policy.seed(np.random.SeedSequence(self.seed).spawn(n_slots))
        return policy


def _timed_loop(budget_s: float, unit: Callable[[], int]) -> tuple[int, float, float]:
    """Run ``unit`` (returns steps done) until ``budget_s`` has passed, at least once; return
    (steps, wall-clock seconds, CPU seconds of this process)."""
    steps = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    while True:
        steps += unit()
        now = time.perf_counter()
        if now >= deadline:
            return steps, now - t0, time.process_time() - c0


class _InProcess:
    """Defaults of a row whose work all happens in this process."""

    in_process = True
    uses_ray = False

    def child_pids(self) -> list[int]:
        """None: everything runs here."""
        return []


@dataclass
class RowSpec:
    """One row of the table: a label, its number of environments and how to build its runner.

    ``compare_n``: the SyncVectorEnv row (same N) this row is compared with, when there is one.
    ``key``: a short unique id (``--rows`` filters on it; targets name rows by it).
    ``vs_local``: the key of the ``local`` row this (parallel) row is compared with.
    ``sampler``: the corral sampler's name, for corral rows.
    ``envs``: the environment ids the row is measured on (None: every table's).
    """

    method: str
    n: int
    build: Callable[[BenchContext], Runner]
    compare_n: int | None = None
    kind: str = "corral"
    key: str = ""
    vs_local: str | None = None
    sampler: str | None = None
    envs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.kind if self.n == 1 else f"{self.kind}/{self.n}"


def select(items: Iterable[Any], patterns: list[str] | None, no_ray: bool) -> list[Any]:
    """Rows (or call-cost specs) whose ``key`` contains one of ``patterns`` (all when None);
    without the Ray ones when ``no_ray``."""
    out = []
    for item in items:
        if no_ray and getattr(item, "sampler", None) == "ray":
            continue
        if patterns and not any(p in item.key for p in patterns):
            continue
        out.append(item)
    return out


@dataclass
class Target:
    """A required speed-up: row ``row`` at least ``minimum`` times row ``base`` (steps/s medians)."""

    env_id: str
    row: str
    base: str
    minimum: float
    label: str


@dataclass
class Result:
    """Measurements of one row: steps per wall-clock second and per CPU second.

    The CPU time of a row that works in other processes is this process's plus those processes'
    (and, for Ray rows, the Ray runtime's own processes): ``multi_process`` is then true.
    """

    spec: RowSpec
    rates: list[float] = field(default_factory=list)
    cpu_rates: list[float] = field(default_factory=list)
    steps: int = 0
    error: str | None = None
    multi_process: bool = False
    server_stats: dict[str, float] | None = None

    @property
    def median(self) -> float:
        """Median steps per second over the repeats (NaN when the row failed)."""
        return statistics.median(self.rates) if self.rates else float("nan")

    @property
    def spread(self) -> str:
        """Half the range of the repeats, as a percentage of the median ("" for one repeat)."""
        if len(self.rates) < 2:
            return ""
        return f"{(max(self.rates) - min(self.rates)) / 2 / self.median * 100:.0f}%"

    @property
    def cpu_median(self) -> float | None:
        """Median steps per CPU second (None when no CPU time could be measured)."""
        return statistics.median(self.cpu_rates) if self.cpu_rates else None


def _row_processes(runner: Runner, claimed: set[int]) -> set[int]:
    """The processes whose CPU time counts for ``runner`` besides this one: its own, and for a Ray
    row the Ray runtime's (every Ray process below this one that no other row claims)."""
    own = set(runner.child_pids())
    if not runner.uses_ray:
        return own
    others = claimed - own
    return own | {p for p in _descendants(_proc_table(), os.getpid()) - others if _is_ray_process(p)}


def _cpu_of(pids: set[int]) -> dict[int, float] | None:
    """CPU seconds of those of ``pids`` that are running (None without /proc)."""
    table = _proc_table()
    if not table:
        return None
    return {p: table[p][1] for p in pids if p in table}


def measure(ctx: BenchContext, rows: list[RowSpec], budget_s: float, warmup_s: float, repeats: int,
            log: Callable[[str], None] = print) -> list[Result]:
    """Build every row, warm it up, then measure the rows round-robin ``repeats`` times."""
    results = [Result(spec) for spec in rows]
    runners: list[Runner | None] = []
    try:
        for res in results:
            runner = None
            try:
                t0 = time.perf_counter()
                runner = res.spec.build(ctx)
                built = time.perf_counter() - t0
                runner.run(warmup_s)
                if not runner.in_process:
                    log(f"  {res.spec.method} N={res.spec.n}: started in {built:.1f} s (not measured)")
            except Exception as exc:  # a broken row is reported, the others still run
                res.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                log(f"  {res.spec.method} N={res.spec.n}: FAILED ({res.error})")
                if runner is not None:
                    try:
                        runner.close()
                    except Exception:
                        pass
                runner = None
            runners.append(runner)
        claimed = {p for r in runners if r is not None for p in r.child_pids()}
        cpu_lost: set[int] = set()  # rows whose other processes' CPU time could not be read
        for rep in range(repeats):
            for k, (res, runner) in enumerate(zip(results, runners)):
                if runner is None:
                    continue
                pids = set() if runner.in_process else _row_processes(runner, claimed)
                before = _cpu_of(pids)
                steps, wall, cpu = runner.run(budget_s)
                after = _cpu_of(pids)
                res.rates.append(steps / wall)
                res.steps += steps
                if not runner.in_process:
                    res.multi_process = True
                    own = set(runner.child_pids())
                    if before is None or after is None or not own <= before.keys() & after.keys():
                        cpu_lost.add(k)  # no /proc, or a worker went away: no honest total
                    else:  # (a Ray runtime process that came or went in between is left out)
                        cpu += sum(after[p] - before[p] for p in before.keys() & after.keys())
                if cpu > 0 and k not in cpu_lost:
                    res.cpu_rates.append(steps / cpu)
            log(f"  repeat {rep + 1}/{repeats} done")
        for k in cpu_lost:
            results[k].cpu_rates.clear()
    finally:
        for res, runner in zip(results, runners):
            if runner is not None and hasattr(runner, "stats"):
                res.server_stats = runner.stats()
        for runner in runners:
            if runner is not None:
                try:
                    runner.close()
                except Exception as exc:  # noqa: BLE001 - close the others anyway
                    log(f"  closing a row failed: {type(exc).__name__}: {exc}")
    return results
