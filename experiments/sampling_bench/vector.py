"""Issue 20's rows: ``worker=vector`` beside a bare loop over the same VectorEnv, their targets and the
table of each row against its floor."""

from __future__ import annotations

from typing import Any, Iterable

from . import settings
from .harness import BenchContext, Result, RowSpec, Runner, Target
from .loops import BareVectorRunner
from .samplers import CorralRunner, corral_key
from .settings import (
    ENVPOOL_INSTALLED,
    HALF_CHEETAH_ID,
    HALF_CHEETAH_POOL_N,
    NATIVE_ENVS,
    VECTOR_ENVPOOL_N,
    VECTOR_NATIVE_N,
)


def vector_key(sampler: str, backend: str, n_envs: int, n_workers: int = 1, threads: int = 0,
               fragments: bool = False, carry: bool = False) -> str:
    """The key of a ``worker=vector`` row:
    ``sampler/vector-<backend>[-t<threads>][-frag|-carry]/<workers>x<envs>``."""
    return (f"{sampler}/vector-{backend}" + (f"-t{threads}" if threads else "") + ("-frag" if fragments else "")
            + ("-carry" if carry else "") + f"/{n_workers}x{n_envs}")


def vector_batch(ctx: BenchContext, n_envs: int, n_workers: int = 1) -> int:
    """Steps per obtain_samples call of a vector row: ``batch_size / 32`` per environment (128 by default),
    the share of each environment of ``vec(32)`` with the default batch, so many environments do not
    shrink the episodes a call may hold to a step or two each."""
    return n_envs * n_workers * max(1, ctx.batch_size // 32)


def vector_row(backend: str, n_envs: int, *, sampler: str = "local", n_workers: int = 1, threads: int = 0,
               fragments: bool = False, carry: bool = False, envs: tuple[str, ...] = NATIVE_ENVS) -> RowSpec:
    """A ``worker=vector`` row (whole episodes, with ``fragments`` the fragments of ``batch_size / 32`` steps
    per environment per rollout, with ``carry`` whole episodes under ``worker.carry_episodes=true``)."""
    args: dict[str, Any] = {"n_envs": n_envs, "backend": backend}
    if threads:
        args["num_threads"] = threads
    what = f"{backend}, {n_envs}" + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")

    def build(ctx: BenchContext) -> Runner:
        worker_args = dict(args)
        if fragments:
            worker_args["timesteps_per_call"] = max(1, ctx.batch_size // 32)
        if carry:
            worker_args["carry_episodes"] = True
        return CorralRunner(ctx, sampler, "vector", worker_args, n_workers,
                            {"device": settings.SERVER_DEVICE} if sampler in ("action_server", "alternating") else {},
                            batch_size=vector_batch(ctx, n_envs, n_workers))

    label = (f"corral {sampler} + vector({what})" + (" fragments" if fragments else "")
             + (" carried whole episodes" if carry else "") + (f" ({n_workers} workers)" if n_workers > 1 else ""))
    vs_local = (vector_key("local", backend, n_envs * n_workers, 1, threads, fragments, carry) if sampler != "local"
                else None)
    return RowSpec(label, n_envs * n_workers, build,
                   key=vector_key(sampler, backend, n_envs, n_workers, threads, fragments, carry),
                   sampler=sampler, envs=envs, kind="corral_vector", vs_local=vs_local)


def bare_vector_row(backend: str, n_envs: int, *, threads: int = 0, envs: tuple[str, ...] = NATIVE_ENVS) -> RowSpec:
    """The floor of the vector rows with the same VectorEnv (see :class:`BareVectorRunner`)."""
    what = f"{backend}, {n_envs}" + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")
    return RowSpec(f"floor: bare loop over the VectorEnv({what}) + policy", n_envs,
                   lambda ctx: BareVectorRunner(ctx, backend, n_envs, threads), kind="bare_vector",
                   key=f"bare/{backend}" + (f"-t{threads}" if threads else "") + f"/{n_envs}", envs=envs)


def vector_rows() -> list[RowSpec]:
    """Issue 20's rows: local + vector beside a bare loop over the same VectorEnv (native CartPole at 32,
    256 and 1024 environments, EnvPool CartPole at 32 and 256, EnvPool HalfCheetah at 16 and 64 with 1 and 2 threads),
    each CartPole row also in fragment mode (what PPO, TRPO and VPG can now train from, as SB3 and CleanRL
    do) and with ``carry_episodes`` (whole episodes, environments kept running), and multiprocessing
    2 x vector(native, 128) in the three modes. EnvPool rows only where it is installed."""
    rows: list[RowSpec] = []
    for n in VECTOR_NATIVE_N:
        rows += [bare_vector_row("native", n), vector_row("native", n), vector_row("native", n, fragments=True),
                 vector_row("native", n, carry=True)]
    rows.append(vector_row("native", 128, sampler="multiprocessing", n_workers=2))
    rows.append(vector_row("native", 128, sampler="multiprocessing", n_workers=2, fragments=True))
    rows.append(vector_row("native", 128, sampler="multiprocessing", n_workers=2, carry=True))
    if ENVPOOL_INSTALLED:
        for n in VECTOR_ENVPOOL_N:
            rows += [bare_vector_row("envpool", n, threads=1, envs=("CartPole-v1",)),
                     vector_row("envpool", n, threads=1, envs=("CartPole-v1",)),
                     vector_row("envpool", n, threads=1, envs=("CartPole-v1",), fragments=True),
                     vector_row("envpool", n, threads=1, envs=("CartPole-v1",), carry=True)]
        for n in HALF_CHEETAH_POOL_N:
            for t in (1, 2):
                rows += [bare_vector_row("envpool", n, threads=t, envs=(HALF_CHEETAH_ID,)),
                         vector_row("envpool", n, threads=t, envs=(HALF_CHEETAH_ID,))]
    return rows


def rows_for(env_id: str, rows: Iterable[RowSpec]) -> list[RowSpec]:
    """The rows measured on ``env_id`` (those without ``envs`` everywhere)."""
    return [r for r in rows if r.envs is None or env_id in r.envs]


def vector_targets() -> list[Target]:
    """Issue 20's targets for ``worker=vector`` (ratios of one run), for whole-episode rollouts, for fragments
    (the rollouts that PPO, TRPO and VPG, like the off-policy algorithms, can learn from) and for whole
    episodes with ``carry_episodes``."""
    local_vec = corral_key("local", "vec", 32, 1)
    targets: list[Target] = []
    for frag, carry in ((False, False), (True, False), (False, True)):
        mode = " fragments" if frag else " carried whole episodes" if carry else ""
        v32 = vector_key("local", "native", 32, fragments=frag, carry=carry)
        v256 = vector_key("local", "native", 256, fragments=frag, carry=carry)
        targets += [
            Target("CartPole-v1", v32, "bare/native/32", 0.85, f"local + vector(native, 32){mode} vs its bare loop"),
            Target("CartPole-v1", v32, local_vec, 2.0, f"local + vector(native, 32){mode} vs local + vec(32)"),
            Target("CartPole-v1", v256, "bare/native/256", 0.8, f"local + vector(native, 256){mode} vs its bare loop"),
            Target("CartPole-v1", v256, local_vec, 8.0, f"local + vector(native, 256){mode} vs local + vec(32)"),
            Target("CartPole-v1", vector_key("multiprocessing", "native", 128, 2, fragments=frag, carry=carry), v256, 1.3,
                   f"multiprocessing 2 x vector(native, 128){mode} vs local + vector(native, 256){mode}"),
        ]
        if ENVPOOL_INSTALLED:
            targets.append(Target("CartPole-v1", vector_key("local", "envpool", 256, threads=1, fragments=frag,
                                                            carry=carry),
                                  "bare/envpool-t1/256", 0.8, f"local + vector(envpool, 256){mode} vs its bare loop"))
    if not ENVPOOL_INSTALLED:
        return targets
    for n in HALF_CHEETAH_POOL_N:
        targets += [
            Target(HALF_CHEETAH_ID, vector_key("local", "envpool", n, threads=2),
                   vector_key("local", "envpool", n, threads=1), 1.6, f"local + vector(envpool, {n}): 2 threads vs 1 thread"),
            Target(HALF_CHEETAH_ID, f"bare/envpool-t2/{n}", f"bare/envpool-t1/{n}",
                   1.6, f"bare loop over EnvPool({n}): 2 threads vs 1 thread"),
        ]
    return targets


def vector_floor_table(results: list[Result]) -> str:
    """Each local ``worker=vector`` row over the bare loop with the same VectorEnv and policy (its floor)."""
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = []
    for r in results:
        if r.error or r.spec.kind != "corral_vector" or not r.spec.key.startswith("local/"):
            continue
        backend = r.spec.key.split("/")[1].removeprefix("vector-").removesuffix("-frag").removesuffix("-carry")
        floor = by_key.get(f"bare/{backend}/{r.spec.n}")
        if floor is None:
            continue
        rounds = [a / b for a, b in zip(r.rates, floor.rates)]
        spread = f"{min(rounds):.2f}x to {max(rounds):.2f}x" if len(rounds) > 1 else ""
        st = r.server_stats or {}
        taken = st.get("vector_taken")
        share = f"{st['vector_recorded'] / taken:.2f}" if taken else ""
        lines.append(f"| {r.spec.method} | {r.median:,.0f} | {floor.median:,.0f} | {r.median / floor.median:.2f}x "
                     f"| {spread} | {share} |")
    if not lines:
        return ""
    return "\n".join(["| row | steps/s | its floor's steps/s | ratio | same-round ratios "
                      "| steps returned / steps the VectorEnv took |", "|---|---:|---:|---:|---:|---:|", *lines])
