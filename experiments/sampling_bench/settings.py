"""Constants every part of the sampling benchmark shares (``SERVER_DEVICE`` is read when rows are
built, so a caller such as ``experiments/bench_gpu.py`` may change it first)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CPU_HEAVY_ID = "corral/CPUHeavyCartPole-v1"
#: MuJoCo's HalfCheetah (issue 4's second CPU-bound workload), measured by default where MuJoCo is installed.
HALF_CHEETAH_ID = "HalfCheetah-v5"
MUJOCO_INSTALLED = importlib.util.find_spec("mujoco") is not None
DEFAULT_ENVS = ("CartPole-v1", CPU_HEAVY_ID) + ((HALF_CHEETAH_ID,) if MUJOCO_INSTALLED else ())
DEFAULT_OUT = ROOT / "experiments" / "results" / "bench_sampling.md"
#: CPUs of the Ray runtime the benchmark starts (the parallel rows use 2 workers).
RAY_NUM_CPUS = 2
#: Ray's per-actor CPU reservation in the benchmark: a scheduling number only (actors run torch
#: with one thread either way); 0.5 lets both Ray rows of a table (4 actors) exist at once on
#: the 2-CPU runtime, which round-robin measurement needs.
RAY_ACTOR_CPUS = 0.5
#: Start method of gymnasium's AsyncVectorEnv processes: forkserver, not fork, because this process
#: runs Ray's and torch's threads (fork would copy their locks); start-up is excluded anyway.
ASYNC_CONTEXT = "forkserver"
#: Device of the action-server rows (bench_gpu.py runs the same comparison with cuda).
SERVER_DEVICE = "cpu"
#: Hidden layers of the heavier policy (``--heavy-envs`` tables).
HEAVY_HIDDEN = (512, 512)
#: Environment used for the fixed cost of one obtain_samples call (episodes cut to 1 step).
CALL_COST_ENV = "CartPole-v1"

#: Where the vector worker's backends apply: gymnasium's native vector CartPole, EnvPool's CartPole and HalfCheetah.
NATIVE_ENVS = ("CartPole-v1",)
ENVPOOL_ENVS = ("CartPole-v1", HALF_CHEETAH_ID)
ENVPOOL_INSTALLED = importlib.util.find_spec("envpool") is not None
#: Environments per worker of the vector rows.
VECTOR_NATIVE_N = (32, 256, 1024)
VECTOR_ENVPOOL_N = (32, 256)
#: Sizes of the EnvPool HalfCheetah pools measured with 1 and 2 threads: 16 (8 environments per
#: thread and step) and 64 (32 per thread), to show how EnvPool's threads pay off with pool size.
HALF_CHEETAH_POOL_N = (16, 64)
