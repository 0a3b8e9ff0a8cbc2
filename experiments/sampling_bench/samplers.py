"""corral's samplers as rows: whole ``obtain_samples`` calls, the rows of every sampler and worker, and
the fixed cost of one call."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import settings
from .harness import BenchContext, RowSpec, _timed_loop
from .settings import CALL_COST_ENV, CPU_HEAVY_ID, RAY_ACTOR_CPUS


def env_recipe_id(env_id: str) -> str:
    """The id worker processes make: the CPU-heavy env as ``module:id``, so that gymnasium imports
    the module that registers it in whatever process makes it (a spawned worker, a Ray actor)."""
    return f"corral.plugins.envs.cpu_heavy:{env_id}" if env_id == CPU_HEAVY_ID else env_id


def build_sampler(ctx: BenchContext, sampler: str, worker: str, worker_args: dict[str, Any], n_workers: int,
                  sampler_args: dict[str, Any], policy: Any, max_episode_length: int | None = None) -> Any:
    """``sampler`` + ``worker`` looked up by name in corral's plugin registry, built like a user would."""
    from corral.framework.env import EnvFactory
    from corral.framework.plugins import get_registry

    registry = get_registry()
    sampler_cls = registry.get("sampler", sampler).factory
    worker_cls = registry.get("worker", worker).factory
    return sampler_cls(policy, EnvFactory(env_recipe_id(ctx.env_id)), seed=ctx.seed, n_workers=n_workers,
                       max_episode_length=max_episode_length, worker_class=worker_cls,
                       worker_args=dict(worker_args), **sampler_args)


def _sampler_pids(sampler: Any) -> list[int]:
    """Worker processes of a multiprocessing sampler / actor processes of a Ray sampler."""
    if hasattr(sampler, "worker_pids"):
        return [p for p in sampler.worker_pids if p is not None]
    return [pid for pid, _node in getattr(sampler, "locations", [])]


class CorralRunner:
    """A corral sampler: whole ``obtain_samples`` calls, each with a fresh parameter update."""

    def __init__(self, ctx: BenchContext, sampler: str, worker: str, worker_args: dict[str, Any],
                 n_workers: int, sampler_args: dict[str, Any], batch_size: int | None = None) -> None:
        self.policy = ctx.make_policy(1)
        self.batch_size = batch_size or ctx.batch_size
        self.sampler = build_sampler(ctx, sampler, worker, worker_args, n_workers, sampler_args, self.policy)
        self.itr = 0
        self.recorded = 0  # steps returned (warm-up included)
        self.in_process = sampler == "local"
        self.uses_ray = sampler == "ray"

    def _unit(self) -> int:
        batch = self.sampler.obtain_samples(self.itr, self.batch_size, self.policy.get_param_values())
        self.itr += 1
        self.recorded += len(batch)
        return len(batch)

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def child_pids(self) -> list[int]:
        """The sampler's worker or actor processes."""
        return [] if self.in_process else _sampler_pids(self.sampler)

    def stats(self) -> dict[str, float] | None:
        """An action server's counters (forward passes, requests, seconds serving / in forward passes)."""
        server = getattr(self.sampler, "server", None)
        if server is None:
            # worker=vector in this process: the steps its VectorEnvs took, recorded or not
            taken = [getattr(w, "env_steps_taken", None) for w in getattr(self.sampler, "_workers", [])]
            if taken and None not in taken:
                return {"steps": 0, "vector_taken": float(sum(taken)), "vector_recorded": float(self.recorded)}
            return None
        return {"steps": server.n_served_steps, "requests": server.n_served_requests, "serve_s": server.serve_s,
                "forward_s": server.forward_s}

    def close(self) -> None:
        self.sampler.shutdown_worker()


def corral_key(sampler: str, worker: str, n_envs: int = 1, n_workers: int = 1) -> str:
    """The key of a corral row: ``sampler/worker/<workers>x<envs per worker>``."""
    return f"{sampler}/{worker}/{n_workers}x{n_envs if worker != 'default' else 1}"


def corral_row(sampler: str, worker: str, n_envs: int = 1, *, n_workers: int = 1,
               sampler_args: dict[str, Any] | None = None, label: str | None = None) -> RowSpec:
    """A row for ``sampler`` + ``worker`` (looked up in corral's plugin registry by name).

    ``N`` in the table is the total number of environments: ``n_workers * n_envs``. A row of
    another sampler than ``local`` is compared with the ``local`` row that has one worker of the
    same type and the same total number of environments (for the default worker, which steps one
    environment: the one-worker local row).
    """
    worker_args = {"n_envs": n_envs} if worker != "default" else {}
    per_worker = n_envs if worker != "default" else 1
    total = per_worker * n_workers
    method = label or (f"corral {sampler} + {worker}" + (f"({n_envs})" if worker != "default" else "")
                       + (f" ({n_workers} workers)" if n_workers > 1 else ""))
    vs_local = None
    if sampler != "local":
        vs_local = corral_key("local", worker, total if worker != "default" else 1, 1)
    return RowSpec(
        method=method,
        n=total,
        build=lambda ctx: CorralRunner(ctx, sampler, worker, worker_args, n_workers, dict(sampler_args or {})),
        compare_n=total if total > 1 else None,
        key=corral_key(sampler, worker, n_envs, n_workers),
        vs_local=vs_local,
        sampler=sampler,
    )


@dataclass
class CallCostSpec:
    """A sampler whose fixed cost per ``obtain_samples`` call is measured."""

    label: str
    sampler: str
    worker: str
    n_envs: int = 1
    n_workers: int = 1
    sampler_args: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Same form as the corral rows' keys (``--rows`` filters on it)."""
        return corral_key(self.sampler, self.worker, self.n_envs, self.n_workers)


@dataclass
class CallCost:
    """Per-call times (seconds) of one sampler, with and without an agent update."""

    spec: CallCostSpec
    with_update: list[float] = field(default_factory=list)
    without_update: list[float] = field(default_factory=list)
    steps_per_call: int = 0
    update_bytes: int = 0
    error: str | None = None


def call_cost_specs() -> list[CallCostSpec]:
    """The samplers whose per-call cost is measured."""
    specs = []
    for worker, n_envs in (("default", 1), ("vec", 16)):
        w = worker if worker == "default" else f"{worker}({n_envs})"
        specs.append(CallCostSpec(f"local + {w} (1 worker)", "local", worker, n_envs, 1))
        specs.append(CallCostSpec(f"multiprocessing + {w} (2 workers)", "multiprocessing", worker, n_envs, 2))
        specs.append(CallCostSpec(f"ray + {w} (2 workers)", "ray", worker, n_envs, 2, {"num_cpus": RAY_ACTOR_CPUS}))
        for server in ("action_server", "alternating"):
            specs.append(CallCostSpec(f"{server} + {w} (2 workers)", server, worker, n_envs, 2,
                                      {"device": settings.SERVER_DEVICE}))
    return specs


def measure_call_cost(spec: CallCostSpec, seed: int, calls: int, warmup_calls: int = 5) -> CallCost:
    """The fixed cost of ``obtain_samples``: calls that do almost no sampling.

    The sampler is built on CartPole-v1 with ``max_episode_length=1``, so ``obtain_samples(itr, 1,
    update)`` makes every worker reset its environments and take one step per environment (one
    1-step episode per environment: 1 step for the default worker, ``n_envs`` for vec) and return
    them. What remains is the per-call machinery: the agent update pickled/shipped and loaded
    (``update = policy.get_param_values()``, as a trainer sends every epoch), the request, the
    batch sent back and concatenated. Calls with ``update=None`` (nothing shipped) alternate with
    them, so their difference is the update's share. Start-up and ``warmup_calls`` are excluded.
    """
    ctx = BenchContext(env_id=CALL_COST_ENV, seed=seed, batch_size=1)
    policy = ctx.make_policy(1)
    result = CallCost(spec)
    worker_args = {"n_envs": spec.n_envs} if spec.worker != "default" else {}
    sampler = build_sampler(ctx, spec.sampler, spec.worker, worker_args, spec.n_workers, spec.sampler_args,
                            policy, max_episode_length=1)
    try:
        import pickle

        params = policy.get_param_values()
        result.update_bytes = len(pickle.dumps(params, protocol=5))
        for itr in range(warmup_calls):
            sampler.obtain_samples(itr, 1, params)
            sampler.obtain_samples(itr, 1, None)
        for itr in range(warmup_calls, warmup_calls + calls):
            t0 = time.perf_counter()
            batch = sampler.obtain_samples(itr, 1, params)
            t1 = time.perf_counter()
            sampler.obtain_samples(itr, 1, None)
            t2 = time.perf_counter()
            result.with_update.append(t1 - t0)
            result.without_update.append(t2 - t1)
            result.steps_per_call = len(batch)
    finally:
        sampler.shutdown_worker()
    return result


def call_cost_table(costs: list[CallCost]) -> str:
    """Milliseconds per call (median, and 90th percentile) with and without an agent update, and
    the difference to the local sampler with the same worker type (the parallel machinery's cost)."""
    lines = ["| sampler | steps per call | ms per call (median) | p90 | ms per call, no agent update (median) "
             "| update's share (ms) | more than local, same worker (ms) |", "|---|---:|---:|---:|---:|---:|---:|"]
    local = {c.spec.worker: statistics.median(c.with_update) for c in costs
             if c.spec.sampler == "local" and not c.error and c.with_update}
    for c in costs:
        if c.error:
            lines.append(f"| {c.spec.label} | | failed: {c.error} | | | | |")
            continue
        med, med_none = statistics.median(c.with_update) * 1e3, statistics.median(c.without_update) * 1e3
        p90 = float(np.percentile(c.with_update, 90)) * 1e3
        extra = ""
        if c.spec.sampler != "local" and c.spec.worker in local:
            extra = f"{med - local[c.spec.worker] * 1e3:+.2f}"
        lines.append(f"| {c.spec.label} | {c.steps_per_call} | {med:.2f} | {p90:.2f} | {med_none:.2f} "
                     f"| {med - med_none:+.2f} | {extra} |")
    return "\n".join(lines)
