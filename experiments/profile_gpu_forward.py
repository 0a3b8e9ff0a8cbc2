"""Where an action server's policy call goes on a GPU: the forward pass eager and as a CUDA graph.

    python experiments/profile_gpu_forward.py --out experiments/results/profile_gpu_forward.md

An action server answers each environment step of its workers with one ``get_actions`` call on a
small batch (16 or 32 CartPole observations in ``bench_gpu.py``). This script times, per call, in
microseconds (median over rounds):

- ``cpu``: the policy's own cpu forward (batch-invariant numpy, as every cpu sampler runs it);
- ``cuda eager``: torch's forward on the GPU, one launch per layer and activation
  (:class:`corral.rl.device_forward.EagerDeviceForward`);
- ``cuda graph``: the same kernels captured once as a CUDA graph and replayed
  (:class:`corral.rl.device_forward.GraphedDeviceForward`, what ``policy=mlp`` runs on a GPU);
- the floor under any GPU forward: the two copies and the wait alone, and an empty wait;
- the whole ``get_actions`` call (forward plus the numpy sampling of the actions) on cpu and on the GPU.

Without a GPU it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))

from sampling_bench.report import emit, profile_document  # noqa: E402

OBS_DIM, N_ACTIONS = 4, 2  # CartPole


def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over ``rounds`` of the mean microseconds per call of ``fn``, after a warm-up."""
    for _ in range(max(calls // 10, 10)):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def measure(hidden: list[int], n: int, calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per call of each way of computing the policy's output for ``n`` observations."""
    import copy

    import gymnasium as gym
    import torch

    from corral.framework.env import EnvSpec
    from corral.plugins.policies.mlp import MLPPolicy
    from corral.rl.device_forward import EagerDeviceForward, GraphedDeviceForward

    device = torch.device("cuda")
    spec = EnvSpec(gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,)), gym.spaces.Discrete(N_ACTIONS))
    cpu = MLPPolicy(spec, hidden)
    gpu = copy.deepcopy(cpu).to(device)
    x = np.random.default_rng(0).normal(size=(n, OBS_DIM)).astype(np.float32)
    eager, graphed = EagerDeviceForward(gpu.net, device), GraphedDeviceForward(gpu.net, device)
    host_in = torch.zeros((n, OBS_DIM)).pin_memory()
    host_out = torch.zeros((n, N_ACTIONS)).pin_memory()
    dev_in = torch.zeros((n, OBS_DIM), device=device)
    dev_out = torch.zeros((n, N_ACTIONS), device=device)
    stream = torch.cuda.current_stream(device)

    def copies_only() -> None:
        host_in.numpy()[...] = x
        dev_in.copy_(host_in, non_blocking=True)
        host_out.copy_(dev_out, non_blocking=True)
        stream.synchronize()

    cpu.reset()
    gpu.reset()
    return {
        "cpu": per_call_us(lambda: cpu._forward_numpy(x), calls, rounds),
        "eager": per_call_us(lambda: eager(x), calls, rounds),
        "graph": per_call_us(lambda: graphed(x), calls, rounds),
        "copies": per_call_us(copies_only, calls, rounds),
        "sync": per_call_us(stream.synchronize, calls, rounds),
        "get_actions_cpu": per_call_us(lambda: cpu.get_actions(x), calls, rounds),
        "get_actions_gpu": per_call_us(lambda: gpu.get_actions(x), calls, rounds),
    }


def main(argv: list[str] | None = None) -> int:
    """Time the variants for each policy size and batch size; print (and with --out write) the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", nargs="+", default=["64x64", "512x512"], help="policy sizes (default: %(default)s)")
    p.add_argument("--batch", nargs="+", type=int, default=[16, 32], help="observations per call (default: %(default)s)")
    p.add_argument("--calls", type=int, default=2000, help="calls per round (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # as the benchmarks and the samplers run torch
    if not torch.cuda.is_available():
        print("profile_gpu_forward.py: no GPU available (torch.cuda.is_available() is false); nothing measured.",
              file=sys.stderr)
        return 2
    rows = []
    for hidden in args.hidden:
        sizes = [int(h) for h in hidden.split("x")]
        for n in args.batch:
            m = measure(sizes, n, args.calls, args.rounds)
            rows.append(f"| {hidden} | {n} | {m['cpu']:.1f} | {m['eager']:.1f} | {m['graph']:.1f} | "
                        f"{m['eager'] / m['graph']:.2f}x | {m['copies']:.1f} | {m['sync']:.1f} | "
                        f"{m['get_actions_cpu']:.1f} | {m['get_actions_gpu']:.1f} |")
    method = (f"Per call, µs, median of {args.rounds} rounds of {args.calls} calls; torch 1 thread; "
              f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}. CartPole's sizes (4 observations, "
              "2 actions). `copies + wait` is the floor under any GPU forward: the batch copied to the GPU and "
              "an output copied back, then the wait; `wait` is an empty stream synchronize.")
    header = ("| policy | batch | cpu forward | cuda eager | cuda graph | eager / graph | copies + wait | wait | "
              "get_actions cpu | get_actions cuda (graph) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    emit(profile_document("The policy's forward pass on a GPU: eager and as a CUDA graph", method, header, rows),
         args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
