"""The rows measured by default (loops and floors, every sampler with every worker, worker=vector)
and the speed targets of issues 2, 4, 5 and 20."""

from __future__ import annotations

from . import settings
from .harness import RowSpec, Target
from .loops import (
    EnvStepsRunner,
    GymAsyncVectorRunner,
    GymSyncVectorRunner,
    MinimalLoopRunner,
    PolicyOnlyRunner,
    RawPolicyRunner,
    RawRandomRunner,
)
from .samplers import corral_key, corral_row
from .settings import CPU_HEAVY_ID, HALF_CHEETAH_ID, HEAVY_HIDDEN, RAY_ACTOR_CPUS
from .vector import vector_rows, vector_targets


def gym_async_row(n_procs: int, envs_per_proc: int = 1) -> RowSpec:
    """A gymnasium AsyncVectorEnv row (see :class:`GymAsyncVectorRunner`)."""
    n = n_procs * envs_per_proc
    label = (f"gym AsyncVectorEnv ({n_procs} procs x SyncVectorEnv({envs_per_proc})) + policy" if envs_per_proc > 1
             else f"gym AsyncVectorEnv ({n_procs} procs) + policy")
    return RowSpec(label, n, lambda ctx: GymAsyncVectorRunner(ctx, n_procs, envs_per_proc), compare_n=n,
                   kind="gym_async", key=f"gym_async/{n_procs}x{envs_per_proc}")


def default_rows() -> list[RowSpec]:
    """The rows measured by default; add later samplers here."""
    rows = [
        RowSpec("raw gymnasium, random actions", 1, RawRandomRunner, kind="raw_random"),
        RowSpec("raw gymnasium + policy (batch 1)", 1, RawPolicyRunner, kind="raw_policy"),
    ]
    for n in (8, 32):
        rows.append(RowSpec("gym SyncVectorEnv + policy", n, lambda ctx, n=n: GymSyncVectorRunner(ctx, n),
                            compare_n=n, kind="gym_sync"))
    rows.append(RowSpec("floor: minimal loop, env steps + policy only", 32, lambda ctx: MinimalLoopRunner(ctx, 32),
                        compare_n=32, kind="floor"))
    # The floor's two parts, measured alone (see step_parts_table).
    rows += [
        RowSpec("part: env.step calls only (32 envs, actions drawn in advance)", 32,
                lambda ctx: EnvStepsRunner(ctx, 32), compare_n=32, kind="env_steps"),
        RowSpec("part: env.unwrapped.step calls only (gymnasium's wrappers skipped)", 32,
                lambda ctx: EnvStepsRunner(ctx, 32, unwrapped=True), compare_n=32, kind="env_unwrapped"),
        RowSpec("part: policy.get_actions only (batch 32; actions/s)", 32, lambda ctx: PolicyOnlyRunner(ctx, 32),
                kind="policy_only"),
    ]
    rows += [
        gym_async_row(2, 16),
        gym_async_row(32),
        corral_row("local", "default"),
        corral_row("local", "default", n_workers=2),
        corral_row("local", "vec", 8),
        corral_row("local", "vec", 32),
    ]
    ray_args = {"num_cpus": RAY_ACTOR_CPUS}
    server_args = {"device": settings.SERVER_DEVICE}
    for sampler, args in (("multiprocessing", {}), ("ray", ray_args), ("action_server", server_args),
                          ("alternating", server_args)):
        rows += [
            corral_row(sampler, "default", n_workers=2, sampler_args=args),
            corral_row(sampler, "vec", 16, n_workers=2, sampler_args=args),
        ]
    return rows + vector_rows()


#: Rows of the heavier-policy tables (``--heavy-envs``): where batching every worker's forward pass matters.
HEAVY_ROW_KEYS = ("gym_async/2x16", "local/vec/1x32", "multiprocessing/vec/2x16", "action_server/vec/2x16",
                  "alternating/vec/2x16")


def heavy_label(env_id: str, hidden_sizes: tuple[int, ...]) -> str:
    """Section name (and targets' env id) of a heavier-policy table."""
    return f"{env_id}, policy {'x'.join(map(str, hidden_sizes))}"


def default_targets() -> list[Target]:
    """The speed targets: the vec worker's (issue 2) and the parallel samplers' (issues 4 and 5)."""
    mp_def, mp_vec = corral_key("multiprocessing", "default", 1, 2), corral_key("multiprocessing", "vec", 16, 2)
    ray_def, ray_vec = corral_key("ray", "default", 1, 2), corral_key("ray", "vec", 16, 2)
    local_def, local_vec = corral_key("local", "default", 1, 1), corral_key("local", "vec", 32, 1)
    as_vec, alt_vec = corral_key("action_server", "vec", 16, 2), corral_key("alternating", "vec", 16, 2)
    cpu_bound = [
        Target(env_id, row, base, minimum, label)
        for env_id in (CPU_HEAVY_ID, HALF_CHEETAH_ID)
        for row, base, minimum, label in (
            (mp_def, local_def, 1.8, "multiprocessing 2 workers (default) vs local"),
            (mp_vec, local_vec, 1.8, "multiprocessing 2 workers x vec(16) vs local vec(32)"),
            (ray_def, local_def, 1.6, "ray 2 workers (default) vs local"),
            (ray_vec, local_vec, 1.6, "ray 2 workers x vec(16) vs local vec(32)"),
        )
    ]
    return [
        *cpu_bound,
        # issue 2: the vec worker in process
        Target("CartPole-v1", local_vec, "gym_sync/32", 1.3, "local vec(32) vs gym SyncVectorEnv(32)"),
        Target("CartPole-v1", local_vec, "raw_random", 0.6, "local vec(32) vs the raw random-action loop"),
        Target("CartPole-v1", mp_vec, local_vec, 1.5, "multiprocessing 2 workers x vec(16) vs local vec(32)"),
        Target("CartPole-v1", mp_vec, "gym_async/2x16", 2.5,
               "multiprocessing 2 workers x vec(16) vs gym AsyncVectorEnv 2 procs x 16 envs"),
        # issue 5: the action servers
        Target("CartPole-v1", as_vec, "gym_async/2x16", 1.5,
               "action_server 2 workers x vec(16) vs gym AsyncVectorEnv 2 procs x 16 envs (same policy)"),
        Target(heavy_label("CartPole-v1", HEAVY_HIDDEN), alt_vec, as_vec, 1.2,
               "alternating vs action_server, 2 workers x vec(16), 512x512 policy"),
        *vector_targets(),
    ]
