"""Where the time of a step goes in a loop over an EnvPool with 1 and 2 threads (issue 20's threads target).

    python experiments/profile_envpool_threads.py --n-envs 16 64 --out experiments/results/profile_envpool_threads.md

For each pool size and thread count, a loop of one batched policy call and one ``step`` per vector step
(the floor loop of ``bench_sampling.py``: corral's stochastic 64x64 MLP policy, the VectorEnv built by
``worker=vector``'s own ``build_vector_env``) is timed phase by phase: microseconds per vector step in
the policy and in ``step``, and how many cores the process kept busy (its CPU time over wall time).
The same pool is then stepped with actions computed beforehand, so that its threads are never left
waiting for the policy. Last, the two threads' other arrangement: two pools of N/2 environments with
1 thread each, pipelined, so that the policy computes one half's actions while the other half steps
(EnvPool's ``send``/``recv``; each half keeps its own order, so the episodes would not depend on
timing). Rounds alternate 1 and 2 threads; medians over rounds are printed, with the
ratios 2 threads / 1 thread. With ``--out`` the table goes to a markdown file with the command.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))

from sampling_bench.harness import BenchContext  # noqa: E402
from sampling_bench.report import emit, profile_document  # noqa: E402


def _pool(env_id: str, n_envs: int, threads: int, seed: int) -> Any:
    from corral.framework.env import EnvFactory
    from corral.framework.vector_env import build_vector_env

    return build_vector_env(EnvFactory(env_id), backend="envpool", n_envs=n_envs, max_episode_length=None,
                            seed=seed, num_threads=threads).venv


def measure(env_id: str, n_envs: int, threads: int, steps: int, seed: int) -> dict[str, float]:
    """Per vector step: policy and step microseconds, cores busy; then cores busy and step time with
    the actions computed beforehand (``pre_*``)."""
    venv = _pool(env_id, n_envs, threads, seed)
    policy = BenchContext(env_id=env_id, seed=seed, batch_size=0).make_policy(n_envs)  # the benchmark's policy
    policy.reset()
    try:
        obs, _ = venv.reset()
        for _ in range(50):
            actions, _ = policy.get_actions(obs)
            obs, *_ = venv.step(actions)
        policy_s = step_s = 0.0
        recorded: list[np.ndarray] = []
        # process_time: this process's CPU seconds, every thread (EnvPool's included), at full resolution
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            actions, _ = policy.get_actions(obs)
            t1 = time.perf_counter()
            obs, *_ = venv.step(actions)
            step_s += time.perf_counter() - t1
            policy_s += t1 - t0
            recorded.append(actions)
        wall = time.perf_counter() - wall0
        cores = (time.process_time() - cpu0) / wall
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for actions in recorded:
            venv.step(actions)
        pre_wall = time.perf_counter() - wall0
        pre_cores = (time.process_time() - cpu0) / pre_wall
    finally:
        venv.close()
    return {"policy_us": policy_s / steps * 1e6, "step_us": step_s / steps * 1e6, "cores": cores,
            "steps_per_s": n_envs * steps / wall, "pre_step_us": pre_wall / steps * 1e6, "pre_cores": pre_cores,
            "pre_steps_per_s": n_envs * steps / pre_wall}


def measure_pipelined(env_id: str, n_envs: int, steps: int, seed: int) -> float:
    """Steps per second of two pools of ``n_envs // 2`` environments (1 thread each), pipelined: the
    policy computes one half's actions while the other half steps."""
    half = n_envs // 2
    pools = [_pool(env_id, half, 1, seed), _pool(env_id, half, 1, seed + half)]
    ctx = BenchContext(env_id=env_id, seed=seed, batch_size=0)
    policies = [ctx.make_policy(half), ctx.make_policy(half)]
    ids = np.arange(half, dtype=np.int32)
    try:
        obs = [pool.reset()[0] for pool in pools]
        for policy in policies:
            policy.reset()

        def turn(k: int) -> None:  # send half k's actions, then take the other half's results
            actions, _ = policies[k].get_actions(obs[k])
            pools[k].send(actions, ids)
            o, *_, info = pools[1 - k].recv()
            obs[1 - k] = o[np.argsort(info["env_id"])]

        actions, _ = policies[0].get_actions(obs[0])
        pools[0].send(actions, ids)
        for i in range(100):  # warm-up; half 0 is in flight before every even turn
            turn((i + 1) % 2)
        wall0 = time.perf_counter()
        for i in range(2 * steps):
            turn((i + 1) % 2)
        wall = time.perf_counter() - wall0
        pools[0].recv()  # the half still in flight
    finally:
        for pool in pools:
            pool.close()
    return n_envs * steps / wall


def main() -> None:
    """Parse arguments, measure every pool size with 1 and 2 threads in alternating rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5", help="EnvPool environment id")
    parser.add_argument("--n-envs", type=int, nargs="+", default=[16, 64], help="pool sizes")
    parser.add_argument("--steps", type=int, default=300, help="vector steps timed per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (1 and 2 threads alternate in each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the table to")
    args = parser.parse_args()

    import torch

    warnings.filterwarnings("ignore", message=".*settotalmass.*")
    torch.set_num_threads(1)  # as in corral's workers and the sampling benchmark
    rows = []
    for n in args.n_envs:
        runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
        piped: list[float] = []
        for _ in range(args.rounds):
            for threads in (1, 2):
                runs[threads].append(measure(args.env, n, threads, args.steps, args.seed))
            piped.append(measure_pipelined(args.env, n, args.steps, args.seed))
        med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
        ratio = statistics.median(b["steps_per_s"] / a["steps_per_s"] for a, b in zip(runs[1], runs[2]))
        pre_ratio = statistics.median(b["pre_steps_per_s"] / a["pre_steps_per_s"] for a, b in zip(runs[1], runs[2]))
        pipe_ratio = statistics.median(p / a["steps_per_s"] for a, p in zip(runs[1], piped))
        for t in (1, 2):
            m = med[t]
            pipe = "|  |  |" if t == 1 else f"| {statistics.median(piped):,.0f} | {pipe_ratio:.2f}x |"
            rows.append(f"| {n} | {t} | {m['policy_us']:,.0f} | {m['step_us']:,.0f} | {m['cores']:.2f} | "
                        f"{m['steps_per_s']:,.0f} | {'' if t == 1 else f'{ratio:.2f}x'} | {m['pre_step_us']:,.0f} | "
                        f"{m['pre_cores']:.2f} | {'' if t == 1 else f'{pre_ratio:.2f}x'} {pipe}")
    header = ("| N | threads | policy us/step | step us/step | cores busy | steps/s | 2 vs 1 thread | "
              "step us/step, actions ready | cores busy, actions ready | 2 vs 1 thread, actions ready | "
              "2 pools of N/2 x 1 thread, pipelined: steps/s | pipelined vs 1 thread |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    import envpool

    emit(profile_document(
        f"EnvPool threads: where a step's time goes ({args.env})",
        f"{args.rounds} rounds of {args.steps} vector steps per row (1 and 2 threads alternate); medians over "
        "rounds; ratios are medians of the same-round ratios. Policy: corral's stochastic 64x64 MLP, torch "
        "threads 1. 'Actions ready': the same pool stepped again with the actions recorded in the round, "
        "so no policy call sits between steps. 'Pipelined': two pools of N/2 environments with 1 thread "
        "each; the policy computes one half's actions while the other half steps.", header, rows, versions=f", envpool {envpool.__version__}"), args.out)


if __name__ == "__main__":
    main()
