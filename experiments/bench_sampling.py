"""Sampling throughput: corral's samplers and workers against raw gymnasium loops and vector envs.

    python experiments/bench_sampling.py                      # CartPole-v1 and the CPU-heavy CartPole
    python experiments/bench_sampling.py --envs CartPole-v1 --budget 3 --repeats 5
    python experiments/bench_sampling.py --quick              # small budget (CI smoke test)

Every row steps the same environment with the same stochastic MLP policy (corral's ``MLPPolicy``,
64x64, tanh) and reports environment steps per second:

- ``raw random``: a plain gymnasium loop with ``env.action_space.sample()`` (the ceiling);
- ``raw policy``: the same loop with one policy call per step (batch of 1);
- ``gym SyncVectorEnv``: gymnasium's vector env with N copies and one batched
  ``policy.get_actions`` call per step; autoreset as gymnasium 1.x does it (``NEXT_STEP``: the
  step after an episode ends only resets that slot, so it is not counted as a step);
- ``corral <sampler> + <worker>``: whole ``sampler.obtain_samples(itr, batch, params)`` calls with
  ``params = policy.get_param_values()`` (the agent update a trainer sends every epoch), timed whole.

Rows are measured round-robin (repeat 1 of every row, then repeat 2, ...) so that load from other
processes spreads over all rows; each measurement gets the same time budget (a row that works in
whole calls finishes the call it is in) and the table reports the median over repeats. Ratios are
taken between medians of the same run. Later samplers become rows by adding a :class:`RowSpec` to
:func:`default_rows` (``corral_row("multiprocessing", "vec", 32, n_workers=2)``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing (an installed corral wins)
    sys.path.append(str(ROOT))

CPU_HEAVY_ID = "corral/CPUHeavyCartPole-v1"
DEFAULT_ENVS = ("CartPole-v1", CPU_HEAVY_ID)
DEFAULT_OUT = ROOT / "experiments" / "results" / "bench_sampling.md"


# ---------------------------------------------------------------------------------------------- runners
class Runner(Protocol):
    """One row's workload, built once and measured several times.

    ``in_process``: all the work happens in this process, so its CPU time means something (a
    multi-process sampler's row sets it false and gets no CPU-time columns).
    """

    in_process: bool

    def run(self, budget_s: float) -> tuple[int, float, float]:
        """Work for about ``budget_s`` seconds (whole units); return (environment steps, wall-clock
        seconds, CPU seconds of this process)."""

    def close(self) -> None:
        """Free environments, samplers and processes."""


@dataclass
class BenchContext:
    """What every row shares: the environment, the policy recipe, the seed and the batch size."""

    env_id: str
    seed: int
    batch_size: int
    hidden_sizes: tuple[int, ...] = (64, 64)

    def make_env(self) -> Any:
        """A fresh environment (gymnasium.make with its default wrappers, as a user gets it)."""
        import gymnasium as gym

        if self.env_id == CPU_HEAVY_ID:
            import corral.plugins.envs.cpu_heavy  # noqa: F401  (registers the id)
        return gym.make(self.env_id)

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


class RawRandomRunner:
    """``env.step(env.action_space.sample())`` in a plain loop."""

    in_process = True

    CHUNK = 256

    def __init__(self, ctx: BenchContext) -> None:
        self.env = ctx.make_env()
        self.env.reset(seed=ctx.seed)
        self.env.action_space.seed(ctx.seed)

    def _unit(self) -> int:
        env, sample = self.env, self.env.action_space.sample
        for _ in range(self.CHUNK):
            _, _, terminated, truncated, _ = env.step(sample())
            if terminated or truncated:
                env.reset()
        return self.CHUNK

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def close(self) -> None:
        self.env.close()


class RawPolicyRunner:
    """A plain loop with one ``policy.get_actions`` call per step (batch of 1)."""

    in_process = True

    CHUNK = 64

    def __init__(self, ctx: BenchContext) -> None:
        self.env = ctx.make_env()
        self.policy = ctx.make_policy(1)
        self.obs, _ = self.env.reset(seed=ctx.seed)
        self.policy.reset()

    def _unit(self) -> int:
        env, policy, obs = self.env, self.policy, self.obs
        for _ in range(self.CHUNK):
            actions, _ = policy.get_actions(np.asarray(obs)[None])
            obs, _, terminated, truncated, _ = env.step(actions[0])  # numpy values, as corral workers pass them
            if terminated or truncated:
                obs, _ = env.reset()
                policy.reset()
        self.obs = obs
        return self.CHUNK

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def close(self) -> None:
        self.env.close()


class GymSyncVectorRunner:
    """gymnasium ``SyncVectorEnv`` (autoreset NEXT_STEP) + one batched policy call per step."""

    in_process = True

    def __init__(self, ctx: BenchContext, n_envs: int) -> None:
        from gymnasium.vector import SyncVectorEnv

        self.n = n_envs
        self.venv = SyncVectorEnv([ctx.make_env for _ in range(n_envs)])
        self.policy = ctx.make_policy(n_envs)
        self.obs, _ = self.venv.reset(seed=ctx.seed)
        self.policy.reset()
        self.autoreset = np.zeros(n_envs, dtype=bool)
        self.vec_steps = max(1, 512 // n_envs)

    def _unit(self) -> int:
        venv, policy, obs, autoreset = self.venv, self.policy, self.obs, self.autoreset
        steps = 0
        for _ in range(self.vec_steps):
            actions, _ = policy.get_actions(obs)
            obs, _, terminated, truncated, _ = venv.step(actions)
            # slots that were autoreset this call only reset: no transition to count
            steps += self.n - int(autoreset.sum())
            if autoreset.any():
                policy.reset(autoreset)  # those slots start new episodes now
            autoreset = terminated | truncated
        self.obs, self.autoreset = obs, autoreset
        return steps

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def close(self) -> None:
        self.venv.close()


class CorralRunner:
    """A corral sampler: whole ``obtain_samples`` calls, each with a fresh parameter update."""

    def __init__(self, ctx: BenchContext, sampler: str, worker: str, worker_args: dict[str, Any],
                 n_workers: int, sampler_args: dict[str, Any]) -> None:
        from corral.framework.env import EnvFactory
        from corral.framework.plugins import get_registry

        if ctx.env_id == CPU_HEAVY_ID:
            import corral.plugins.envs.cpu_heavy  # noqa: F401
        registry = get_registry()
        sampler_cls = registry.get("sampler", sampler).factory
        worker_cls = registry.get("worker", worker).factory
        self.policy = ctx.make_policy(1)
        self.batch_size = ctx.batch_size
        self.sampler = sampler_cls(self.policy, EnvFactory(ctx.env_id), seed=ctx.seed, n_workers=n_workers,
                                   worker_class=worker_cls, worker_args=dict(worker_args), **sampler_args)
        self.itr = 0
        self.in_process = sampler == "local"

    def _unit(self) -> int:
        batch = self.sampler.obtain_samples(self.itr, self.batch_size, self.policy.get_param_values())
        self.itr += 1
        return len(batch)

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def close(self) -> None:
        self.sampler.shutdown_worker()


# ---------------------------------------------------------------------------------------------- rows
@dataclass
class RowSpec:
    """One row of the table: a label, its number of environments and how to build its runner.

    ``compare_n``: the SyncVectorEnv row (same N) this row is compared with, when there is one.
    """

    method: str
    n: int
    build: Callable[[BenchContext], Runner]
    compare_n: int | None = None
    kind: str = "corral"


def corral_row(sampler: str, worker: str, n_envs: int = 1, *, n_workers: int = 1,
               sampler_args: dict[str, Any] | None = None, label: str | None = None) -> RowSpec:
    """A row for ``sampler`` + ``worker`` (looked up in corral's plugin registry by name).

    ``N`` in the table is the total number of environments: ``n_workers * n_envs``.
    """
    worker_args = {"n_envs": n_envs} if worker != "default" else {}
    per_worker = n_envs if worker != "default" else 1
    total = per_worker * n_workers
    method = label or f"corral {sampler} + {worker}" + (f" ({n_workers} workers)" if n_workers > 1 else "")
    return RowSpec(
        method=method,
        n=total,
        build=lambda ctx: CorralRunner(ctx, sampler, worker, worker_args, n_workers, dict(sampler_args or {})),
        compare_n=total if total > 1 else None,
    )


def default_rows() -> list[RowSpec]:
    """The rows measured by default; add later samplers here."""
    rows = [
        RowSpec("raw gymnasium, random actions", 1, RawRandomRunner, kind="raw_random"),
        RowSpec("raw gymnasium + policy (batch 1)", 1, RawPolicyRunner, kind="raw_policy"),
    ]
    for n in (8, 32):
        rows.append(RowSpec("gym SyncVectorEnv + policy", n, lambda ctx, n=n: GymSyncVectorRunner(ctx, n),
                            compare_n=n, kind="gym_sync"))
    rows += [
        corral_row("local", "default"),
        corral_row("local", "vec", 8),
        corral_row("local", "vec", 32),
    ]
    return rows


# ---------------------------------------------------------------------------------------------- measuring
@dataclass
class Result:
    """Measurements of one row: steps per wall-clock second and per CPU second of this process."""

    spec: RowSpec
    rates: list[float] = field(default_factory=list)
    cpu_rates: list[float] = field(default_factory=list)
    steps: int = 0
    error: str | None = None

    @property
    def median(self) -> float:
        """Median steps per second over the repeats (NaN when the row failed)."""
        return statistics.median(self.rates) if self.rates else float("nan")

    @property
    def cpu_median(self) -> float | None:
        """Median steps per CPU second (None for rows whose work is not all in this process)."""
        return statistics.median(self.cpu_rates) if self.cpu_rates else None


def measure(ctx: BenchContext, rows: list[RowSpec], budget_s: float, warmup_s: float, repeats: int,
            log: Callable[[str], None] = print) -> list[Result]:
    """Build every row, warm it up, then measure the rows round-robin ``repeats`` times."""
    results = [Result(spec) for spec in rows]
    runners: list[Runner | None] = []
    for res in results:
        runner = None
        try:
            runner = res.spec.build(ctx)
            runner.run(warmup_s)
        except Exception as exc:  # a broken row is reported, the others still run
            res.error = f"{type(exc).__name__}: {exc}"
            log(f"  {res.spec.method} N={res.spec.n}: FAILED ({res.error})")
            if runner is not None:
                try:
                    runner.close()
                except Exception:
                    pass
            runner = None
        runners.append(runner)
    try:
        for rep in range(repeats):
            for res, runner in zip(results, runners):
                if runner is None:
                    continue
                steps, wall, cpu = runner.run(budget_s)
                res.rates.append(steps / wall)
                if runner.in_process and cpu > 0:
                    res.cpu_rates.append(steps / cpu)
                res.steps += steps
            log(f"  repeat {rep + 1}/{repeats} done")
    finally:
        for runner in runners:
            if runner is not None:
                runner.close()
    return results


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}x" if x and y and np.isfinite(x) and np.isfinite(y) else ""


def table(results: list[Result]) -> str:
    """The markdown table of one environment."""
    raw = next((r for r in results if r.spec.kind == "raw_random" and not r.error), None)
    sync = {r.spec.n: r for r in results if r.spec.kind == "gym_sync" and not r.error}
    lines = [
        "| method | N | steps/s | vs SyncVectorEnv (same N) | vs raw random loop "
        "| steps/CPU-s | CPU: vs SyncVectorEnv | CPU: vs raw random |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.spec.method} | {r.spec.n} | failed: {r.error} | | | | | |")
            continue
        base = sync.get(r.spec.compare_n) if r.spec.compare_n is not None else None
        cpu = f"{r.cpu_median:,.0f}" if r.cpu_median else "n/a"
        lines.append(
            f"| {r.spec.method} | {r.spec.n} | {r.median:,.0f} "
            f"| {_ratio(r.median, base.median if base else None)} | {_ratio(r.median, raw.median if raw else None)} "
            f"| {cpu} | {_ratio(r.cpu_median, base.cpu_median if base else None)} "
            f"| {_ratio(r.cpu_median, raw.cpu_median if raw else None)} |"
        )
    return "\n".join(lines)


def machine_info() -> str:
    """CPU count, load, Python, torch, gymnasium and numpy versions."""
    import gymnasium
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"machine: {platform.machine()} {platform.system()}, cpu_count={os.cpu_count()}, "
            f"python {platform.python_version()}, torch {torch.__version__} (threads={torch.get_num_threads()}), "
            f"gymnasium {gymnasium.__version__}, numpy {np.__version__}, load average {load}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="gymnasium ids (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="small budget and batch (smoke test)")
    p.add_argument("--budget", type=float, default=None, help="seconds per measurement (default 2.0; quick 0.1)")
    p.add_argument("--repeats", type=int, default=None, help="measurements per row (default 5; quick 1)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up seconds per row (default 0.5; quick 0)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="steps per obtain_samples call (default 4096; quick 256)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--note", default="", help="a line written under the header (e.g. what else was running)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown output (default: %(default)s)")
    args = p.parse_args(argv)
    q = args.quick
    args.budget = args.budget if args.budget is not None else (0.1 if q else 2.0)
    args.repeats = args.repeats if args.repeats is not None else (1 if q else 5)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if q else 0.5)
    args.batch_size = args.batch_size if args.batch_size is not None else (256 if q else 4096)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and write them to ``--out``."""
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)  # what corral's trainer and worker processes use
    command = shlex.join(["python", *(sys.argv if argv is None else ["experiments/bench_sampling.py", *argv])])
    started = dt.datetime.now().astimezone()
    header = [
        "# Sampling throughput",
        "",
        f"Command: `{command}`",
        "",
        f"Date: {started:%Y-%m-%d %H:%M %Z}",
        "",
        machine_info(),
        "",
        f"Settings: budget {args.budget:g} s per measurement, {args.repeats} repeats (median reported), "
        f"warm-up {args.warmup:g} s, obtain_samples batch {args.batch_size} steps, seed {args.seed}, "
        "policy MLPPolicy 64x64 tanh (stochastic), torch threads 1.",
        "",
        "Columns: steps/s is environment steps per wall-clock second (median over repeats; rows are "
        "measured round-robin). steps/CPU-s divides by this process's CPU time instead, which other "
        "processes on a shared machine disturb much less (n/a for rows that work in other processes). "
        "Ratios are between medians of this run.",
    ]
    if args.note:
        header += ["", args.note]
    print("\n".join(header), flush=True)
    sections = []
    for env_id in args.envs:
        print(f"\nmeasuring {env_id} ...", flush=True)
        ctx = BenchContext(env_id=env_id, seed=args.seed, batch_size=args.batch_size)
        t0 = time.perf_counter()
        results = measure(ctx, default_rows(), args.budget, args.warmup, args.repeats)
        text = f"## {env_id}\n\n{table(results)}\n\n({time.perf_counter() - t0:.0f} s for this table)"
        print("\n" + text, flush=True)
        sections.append(text)
    footer = f"finished {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {machine_info()}"
    print("\n" + footer)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(header) + "\n\n" + "\n\n".join(sections) + "\n\n" + footer + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
