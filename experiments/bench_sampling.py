"""Sampling throughput: corral's samplers and workers against raw gymnasium loops and vector envs.

    python experiments/bench_sampling.py                      # CartPole-v1, the CPU-heavy CartPole (and
                                                              # HalfCheetah-v5 where MuJoCo is installed)
    python experiments/bench_sampling.py --envs CartPole-v1 --budget 3 --repeats 5
    python experiments/bench_sampling.py --quick              # small budget (CI smoke test)
    python experiments/bench_sampling.py --quick --no-ray     # ... without Ray (no Ray runtime started)
    python experiments/bench_sampling.py --rows ray local/vec # only rows whose key contains one of these

Every row steps the same environment with the same stochastic MLP policy (corral's ``MLPPolicy``,
64x64, tanh) and reports environment steps per second:

- ``raw random``: a plain gymnasium loop with ``env.action_space.sample()`` (the ceiling);
- ``raw policy``: the same loop with one policy call per step (batch of 1);
- ``gym SyncVectorEnv``: gymnasium's vector env with N copies and one batched
  ``policy.get_actions`` call per step; autoreset as gymnasium 1.x does it (``NEXT_STEP``: the
  step after an episode ends only resets that slot, so it is not counted as a step);
- ``floor``: a hand-written loop over 32 environments that only calls the policy once per step and
  each environment's ``step`` (and ``reset``), recording nothing: close to the ceiling of any
  in-process vectorised loop with this policy, SyncVectorEnv's and corral's ``vec`` worker's alike;
- ``part``: the floor's two parts measured alone: the 32 environments' ``env.step`` calls with
  actions drawn in advance (and the same through ``env.unwrapped``, gymnasium's wrappers skipped),
  and one ``policy.get_actions`` call on 32 observations. A table under each environment's
  (:func:`step_parts_table`) turns them into microseconds per step of 32 environments and shows
  what they leave for any loop's own machinery, against issue 2's 1.3x SyncVectorEnv(32);
- ``gym AsyncVectorEnv``: the same loop over gymnasium's process-parallel vector env. ``P procs x
  M envs`` is an ``AsyncVectorEnv`` over ``P`` sub-environments that are each a ``SyncVectorEnv`` of
  ``M`` (the outer env's autoreset is disabled; each inner ``SyncVectorEnv`` autoresets its own
  slots), so ``P`` processes step ``M`` environments each, and the main process makes one batched
  policy call for all ``P * M`` per step; ``N procs`` is the plain one-environment-per-process form;
- ``corral <sampler> + <worker>``: whole ``sampler.obtain_samples(itr, batch, params)`` calls with
  ``params = policy.get_param_values()`` (the agent update a trainer sends every epoch), timed whole.

Every row is built (processes spawned, the Ray actors placed) and warmed up before any is
measured, so start-up never counts. Rows are measured round-robin (repeat 1 of every row, then
repeat 2, ...) so that load from other processes spreads over all rows; each measurement gets the
same time budget (a row that works in whole calls finishes the call it is in) and the table
reports the median over repeats. Ratios are taken between medians of the same run. A second
table reports the fixed cost of one ``obtain_samples`` call per sampler (see
:func:`measure_call_cost`), and a third checks the parallel samplers' speed targets
(:func:`default_targets`). The Ray rows are measured last: every other row (and per-call cost) is
measured with no Ray runtime running, whose own processes take CPU that a user of the other
samplers never pays; then one Ray runtime (``ray.init(address="local", num_cpus=2)``) is started
for every Ray row of the run (round-robin among themselves) and shut down at the end. The script
then checks that no process and no shared-memory segment of its own is left.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import os
import platform
import shlex
import statistics
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing (an installed corral wins)
    sys.path.append(str(ROOT))

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


# ---------------------------------------------------------------------------------------------- processes
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


# ---------------------------------------------------------------------------------------------- runners
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


def _make_sync_vector(env_id: str, n_envs: int) -> Any:
    """A ``SyncVectorEnv`` of ``n_envs`` copies: one sub-environment of the nested AsyncVectorEnv.

    Its infos (already batched into arrays of ``n_envs``) are not passed up: gymnasium's outer
    vector env can only merge scalar infos and fails on arrays (HalfCheetah reports positions).
    The inner env still builds them, so only the outer merge is skipped (a saving for gymnasium's row).
    """
    from gymnasium.vector import SyncVectorEnv, VectorWrapper

    class _NoInfosUpward(VectorWrapper):
        def reset(self, **kwargs: Any) -> Any:
            obs, _ = self.env.reset(**kwargs)
            return obs, {}

        def step(self, actions: Any) -> Any:
            obs, rewards, terminated, truncated, _ = self.env.step(actions)
            return obs, rewards, terminated, truncated, {}

    return _NoInfosUpward(SyncVectorEnv([functools.partial(_make_gym_env, env_id) for _ in range(n_envs)]))


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


class _EnvLoop(_InProcess, ABC):
    """An in-process row that works in ``_unit()`` calls (each returns the steps it took) and owns
    the environments in ``self.envs`` (closed with the row)."""

    envs: list[Any] | tuple[Any, ...] = ()  # none unless the row makes some

    @abstractmethod
    def _unit(self) -> int:
        """Do one chunk of work; return the environment steps (or actions) it took."""

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RawRandomRunner(_EnvLoop):
    """``env.step(env.action_space.sample())`` in a plain loop."""

    CHUNK = 256

    def __init__(self, ctx: BenchContext) -> None:
        self.env = ctx.make_env()
        self.envs = [self.env]
        self.env.reset(seed=ctx.seed)
        self.env.action_space.seed(ctx.seed)

    def _unit(self) -> int:
        env, sample = self.env, self.env.action_space.sample
        for _ in range(self.CHUNK):
            _, _, terminated, truncated, _ = env.step(sample())
            if terminated or truncated:
                env.reset()
        return self.CHUNK


class RawPolicyRunner(_EnvLoop):
    """A plain loop with one ``policy.get_actions`` call per step (batch of 1)."""

    CHUNK = 64

    def __init__(self, ctx: BenchContext) -> None:
        self.env = ctx.make_env()
        self.envs = [self.env]
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


class MinimalLoopRunner(_EnvLoop):
    """The least work any in-process vectorised loop can do: per step one batched
    ``policy.get_actions`` and one ``env.step`` per environment (reset when it ends), nothing
    recorded, no agent reset, no infos merged. Its steps/s is close to the ceiling of SyncVectorEnv
    and of corral's ``vec`` worker alike; the strict ceiling, its two parts without even this loop,
    is what :func:`step_parts_table` computes."""

    def __init__(self, ctx: BenchContext, n_envs: int) -> None:
        self.envs = [ctx.make_env() for _ in range(n_envs)]
        self.policy = ctx.make_policy(n_envs)
        seeds = np.random.SeedSequence(ctx.seed).generate_state(n_envs)
        self.obs = np.stack([env.reset(seed=int(s))[0] for env, s in zip(self.envs, seeds)]).astype(np.float32)
        self.obs = self.obs.reshape(n_envs, -1)
        self.policy.reset()
        self.vec_steps = max(1, 512 // n_envs)

    def _unit(self) -> int:
        obs, policy = self.obs, self.policy
        steps = [env.step for env in self.envs]
        resets = [env.reset for env in self.envs]
        n = len(steps)
        for _ in range(self.vec_steps):
            actions, _ = policy.get_actions(obs)
            rows = list(actions)
            for j in range(n):
                o, _, terminated, truncated, _ = steps[j](rows[j])
                if terminated or truncated:
                    o, _ = resets[j]()
                obs[j] = o
        return self.vec_steps * n


class EnvStepsRunner(_EnvLoop):
    """Only the environments' share of a vectorised step: ``env.step`` of each of ``n_envs``
    environments (reset when its episode ends) with actions drawn in advance, no policy call,
    nothing recorded.

    Actions come from the action space (seeded), as the values corral's workers pass (``np.int64``
    for Discrete, ``float32`` arrays for Box), cycled from a pool, already split per environment.
    With ``unwrapped`` the calls go to ``env.unwrapped`` (gymnasium's ``TimeLimit``,
    ``OrderEnforcing`` and ``PassiveEnvChecker`` skipped; the time limit is counted here): what
    stepping these environments costs when every wrapper's work is left out.
    """

    POOL = 64  # vector steps of actions drawn in advance

    def __init__(self, ctx: BenchContext, n_envs: int, *, unwrapped: bool = False) -> None:
        self.envs = [ctx.make_env() for _ in range(n_envs)]
        seeds = np.random.SeedSequence(ctx.seed).generate_state(n_envs)
        for env, s in zip(self.envs, seeds):
            env.reset(seed=int(s))
        space = self.envs[0].action_space
        space.seed(ctx.seed)
        pool = np.stack([np.stack([np.asarray(space.sample()) for _ in range(n_envs)]) for _ in range(self.POOL)])
        self.actions = [list(batch) for batch in pool]
        self.targets = [env.unwrapped if unwrapped else env for env in self.envs]
        limit = self.envs[0].spec.max_episode_steps if self.envs[0].spec is not None else None
        self.limit = limit if unwrapped and limit else None
        self.t = [0] * n_envs
        self.vec_steps = max(1, 512 // n_envs)
        self.next = 0

    def _unit(self) -> int:
        steps = [env.step for env in self.targets]
        resets = [env.reset for env in self.targets]
        t, limit, pool, n = self.t, self.limit, self.actions, len(steps)
        k = self.next
        for _ in range(self.vec_steps):
            rows = pool[k]
            k = (k + 1) % len(pool)
            for j in range(n):
                _, _, terminated, truncated, _ = steps[j](rows[j])
                if limit is not None:
                    t[j] += 1
                    truncated = truncated or t[j] >= limit
                if terminated or truncated:
                    resets[j]()
                    t[j] = 0
        self.next = k
        return self.vec_steps * n


class PolicyOnlyRunner(_EnvLoop):
    """Only the policy's share of a vectorised step: ``policy.get_actions`` on a batch of
    ``n_envs`` observations (real ones, collected in advance and cycled), no environment.
    Its "steps" are actions: ``n_envs`` per call."""

    POOL = 64  # batches of observations collected in advance

    def __init__(self, ctx: BenchContext, n_envs: int) -> None:
        env = ctx.make_env()
        env.action_space.seed(ctx.seed)
        obs, _ = env.reset(seed=ctx.seed)
        rows = []
        for _ in range(self.POOL * n_envs):
            rows.append(np.asarray(obs, dtype=np.float32).reshape(-1))
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
        env.close()
        self.batches = list(np.stack(rows).reshape(self.POOL, n_envs, -1))
        self.policy = ctx.make_policy(n_envs)
        self.policy.reset()
        self.n = n_envs
        self.calls = max(1, 512 // n_envs)
        self.next = 0

    def _unit(self) -> int:
        get_actions, batches, k = self.policy.get_actions, self.batches, self.next
        for _ in range(self.calls):
            get_actions(batches[k])
            k = (k + 1) % len(batches)
        self.next = k
        return self.calls * self.n


class _VectorLoop:
    """One batched policy call per vector step over ``n`` slots; gymnasium 1.x NEXT_STEP autoreset
    (a slot that ended is only reset on its next step, which is therefore not counted)."""

    in_process = True
    uses_ray = False

    def __init__(self, venv: Any, policy: Any, n: int, seed: int, n_sub_envs: int) -> None:
        self.venv, self.policy, self.n = venv, policy, n
        # The actions' shape for venv.step: one row per sub-environment, each of the sub-environment's
        # own action shape (() for Discrete, (6,) for HalfCheetah, (16,) for a nested SyncVectorEnv(16)).
        self.action_shape = (n_sub_envs, *venv.single_action_space.shape)
        obs, _ = venv.reset(seed=seed)
        self.obs = self._flat(obs)
        self.policy.reset()
        self.autoreset = np.zeros(n, dtype=bool)
        self.vec_steps = max(1, 512 // n)

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        return obs.reshape(self.n, -1) if obs.ndim > 2 else obs

    def _unit(self) -> int:
        venv, policy, obs, autoreset = self.venv, self.policy, self.obs, self.autoreset
        steps = 0
        for _ in range(self.vec_steps):
            actions, _ = policy.get_actions(obs)
            obs, _, terminated, truncated, _ = venv.step(actions.reshape(self.action_shape))
            obs = self._flat(obs)
            # slots that were autoreset this call only reset: no transition to count
            steps += self.n - int(autoreset.sum())
            if autoreset.any():
                policy.reset(autoreset)  # those slots start new episodes now
            autoreset = (terminated | truncated).reshape(self.n)
        self.obs, self.autoreset = obs, autoreset
        return steps

    def run(self, budget_s: float) -> tuple[int, float, float]:
        return _timed_loop(budget_s, self._unit)

    def child_pids(self) -> list[int]:
        """The vector env's worker processes (none for SyncVectorEnv)."""
        return [p.pid for p in getattr(self.venv, "processes", []) if p.pid is not None]

    def close(self) -> None:
        self.venv.close()


class GymSyncVectorRunner(_VectorLoop):
    """gymnasium ``SyncVectorEnv`` (autoreset NEXT_STEP) + one batched policy call per step."""

    def __init__(self, ctx: BenchContext, n_envs: int) -> None:
        from gymnasium.vector import SyncVectorEnv

        venv = SyncVectorEnv([ctx.make_env for _ in range(n_envs)])
        super().__init__(venv, ctx.make_policy(n_envs), n_envs, ctx.seed, n_envs)


class GymAsyncVectorRunner(_VectorLoop):
    """gymnasium ``AsyncVectorEnv`` with ``n_procs`` processes of ``envs_per_proc`` environments each,
    and one batched policy call per step (for all ``n_procs * envs_per_proc`` slots) in this process.

    ``envs_per_proc == 1``: the plain form (one environment per process, NEXT_STEP autoreset).
    Otherwise each process's sub-environment is a ``SyncVectorEnv`` of ``envs_per_proc`` that
    autoresets its own slots (NEXT_STEP), and the outer env's autoreset is disabled.
    """

    in_process = False

    def __init__(self, ctx: BenchContext, n_procs: int, envs_per_proc: int = 1) -> None:
        import multiprocessing

        from gymnasium.vector import AsyncVectorEnv

        # the forkserver imports gymnasium once, so its children start without importing it again
        multiprocessing.get_context(ASYNC_CONTEXT).set_forkserver_preload(["__main__", "gymnasium"])
        if envs_per_proc == 1:
            fns = [functools.partial(_make_gym_env, ctx.env_id) for _ in range(n_procs)]
            venv = AsyncVectorEnv(fns, context=ASYNC_CONTEXT)
        else:
            fns = [functools.partial(_make_sync_vector, ctx.env_id, envs_per_proc) for _ in range(n_procs)]
            venv = AsyncVectorEnv(fns, context=ASYNC_CONTEXT, autoreset_mode="Disabled")
        n = n_procs * envs_per_proc
        try:
            super().__init__(venv, ctx.make_policy(n), n, ctx.seed, n_procs)
        except BaseException:
            venv.close(terminate=True)
            raise

    def close(self) -> None:
        self.venv.close(terminate=False)


class BareVectorRunner(_VectorLoop):
    """The floor of a ``worker=vector`` row: a bare loop over the same VectorEnv (built by the vector
    worker's own :func:`~corral.plugins.workers.vector.build_vector_env`) with the same policy, one
    batched ``get_actions`` and one ``step`` call per step, nothing recorded (NEXT_STEP reset steps
    not counted)."""

    def __init__(self, ctx: BenchContext, backend: str, n_envs: int, num_threads: int = 0) -> None:
        from corral.framework.env import EnvFactory
        from corral.plugins.workers.vector import build_vector_env

        venv = build_vector_env(EnvFactory(ctx.env_id), backend=backend, n_envs=n_envs, max_episode_length=None,
                                seed=ctx.seed, num_threads=num_threads).venv
        super().__init__(venv, ctx.make_policy(n_envs), n_envs, ctx.seed, n_envs)


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


# ---------------------------------------------------------------------------------------------- rows
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


def gym_async_row(n_procs: int, envs_per_proc: int = 1) -> RowSpec:
    """A gymnasium AsyncVectorEnv row (see :class:`GymAsyncVectorRunner`)."""
    n = n_procs * envs_per_proc
    label = (f"gym AsyncVectorEnv ({n_procs} procs x SyncVectorEnv({envs_per_proc})) + policy" if envs_per_proc > 1
             else f"gym AsyncVectorEnv ({n_procs} procs) + policy")
    return RowSpec(label, n, lambda ctx: GymAsyncVectorRunner(ctx, n_procs, envs_per_proc), compare_n=n,
                   kind="gym_async", key=f"gym_async/{n_procs}x{envs_per_proc}")


#: Where the vector worker's backends apply: gymnasium's native vector CartPole, EnvPool's CartPole and HalfCheetah.
NATIVE_ENVS = ("CartPole-v1",)
ENVPOOL_ENVS = ("CartPole-v1", HALF_CHEETAH_ID)
ENVPOOL_INSTALLED = importlib.util.find_spec("envpool") is not None
#: Environments per worker of the vector rows, and EnvPool's thread counts on HalfCheetah.
VECTOR_NATIVE_N = (32, 256, 1024)
VECTOR_ENVPOOL_N = (32, 256)
HALF_CHEETAH_POOL_N = 16


def vector_key(sampler: str, backend: str, n_envs: int, n_workers: int = 1, threads: int = 0,
               fragments: bool = False) -> str:
    """The key of a ``worker=vector`` row: ``sampler/vector-<backend>[-t<threads>][-frag]/<workers>x<envs>``."""
    return (f"{sampler}/vector-{backend}" + (f"-t{threads}" if threads else "") + ("-frag" if fragments else "")
            + f"/{n_workers}x{n_envs}")


def vector_batch(ctx: BenchContext, n_envs: int, n_workers: int = 1) -> int:
    """Steps per obtain_samples call of a vector row: ``batch_size / 32`` per environment (128 by default),
    the share of each environment of ``vec(32)`` with the default batch, so many environments do not
    shrink the episodes a call may hold to a step or two each."""
    return n_envs * n_workers * max(1, ctx.batch_size // 32)


def vector_row(backend: str, n_envs: int, *, sampler: str = "local", n_workers: int = 1, threads: int = 0,
               fragments: bool = False, envs: tuple[str, ...] = NATIVE_ENVS) -> RowSpec:
    """A ``worker=vector`` row (whole episodes, or with ``fragments`` the off-policy fragments of
    ``batch_size / 32`` steps per environment per rollout)."""
    args: dict[str, Any] = {"n_envs": n_envs, "backend": backend}
    if threads:
        args["num_threads"] = threads
    what = f"{backend}, {n_envs}" + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")

    def build(ctx: BenchContext) -> Runner:
        worker_args = dict(args)
        if fragments:
            worker_args["timesteps_per_call"] = max(1, ctx.batch_size // 32)
        return CorralRunner(ctx, sampler, "vector", worker_args, n_workers,
                            {"device": SERVER_DEVICE} if sampler in ("action_server", "alternating") else {},
                            batch_size=vector_batch(ctx, n_envs, n_workers))

    label = (f"corral {sampler} + vector({what})" + (" fragments" if fragments else "")
             + (f" ({n_workers} workers)" if n_workers > 1 else ""))
    vs_local = vector_key("local", backend, n_envs * n_workers, 1, threads, fragments) if sampler != "local" else None
    return RowSpec(label, n_envs * n_workers, build, key=vector_key(sampler, backend, n_envs, n_workers, threads, fragments),
                   sampler=sampler, envs=envs, kind="corral_vector", vs_local=vs_local)


def bare_vector_row(backend: str, n_envs: int, *, threads: int = 0, envs: tuple[str, ...] = NATIVE_ENVS) -> RowSpec:
    """The floor of the vector rows with the same VectorEnv (see :class:`BareVectorRunner`)."""
    what = f"{backend}, {n_envs}" + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")
    return RowSpec(f"floor: bare loop over the VectorEnv({what}) + policy", n_envs,
                   lambda ctx: BareVectorRunner(ctx, backend, n_envs, threads), kind="bare_vector",
                   key=f"bare/{backend}" + (f"-t{threads}" if threads else "") + f"/{n_envs}", envs=envs)


def vector_rows() -> list[RowSpec]:
    """Issue 20's rows: local + vector beside a bare loop over the same VectorEnv (native CartPole at 32,
    256 and 1024 environments, EnvPool CartPole at 32 and 256, EnvPool HalfCheetah with 1 and 2 threads),
    fragments at 256, and multiprocessing 2 x vector(native, 128). EnvPool rows only where it is installed."""
    rows: list[RowSpec] = []
    for n in VECTOR_NATIVE_N:
        rows += [bare_vector_row("native", n), vector_row("native", n)]
    rows.append(vector_row("native", 256, fragments=True))
    rows.append(vector_row("native", 128, sampler="multiprocessing", n_workers=2))
    if ENVPOOL_INSTALLED:
        for n in VECTOR_ENVPOOL_N:
            rows += [bare_vector_row("envpool", n, threads=1, envs=("CartPole-v1",)),
                     vector_row("envpool", n, threads=1, envs=("CartPole-v1",))]
        for t in (1, 2):
            rows += [bare_vector_row("envpool", HALF_CHEETAH_POOL_N, threads=t, envs=(HALF_CHEETAH_ID,)),
                     vector_row("envpool", HALF_CHEETAH_POOL_N, threads=t, envs=(HALF_CHEETAH_ID,))]
    return rows


def rows_for(env_id: str, rows: Iterable[RowSpec]) -> list[RowSpec]:
    """The rows measured on ``env_id`` (those without ``envs`` everywhere)."""
    return [r for r in rows if r.envs is None or env_id in r.envs]


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
    server_args = {"device": SERVER_DEVICE}
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


# ---------------------------------------------------------------------------------------------- targets
@dataclass
class Target:
    """A required speed-up: row ``row`` at least ``minimum`` times row ``base`` (steps/s medians)."""

    env_id: str
    row: str
    base: str
    minimum: float
    label: str


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


def vector_targets() -> list[Target]:
    """Issue 20's targets for ``worker=vector`` (ratios of one run)."""
    local_vec = corral_key("local", "vec", 32, 1)
    v32, v256 = vector_key("local", "native", 32), vector_key("local", "native", 256)
    hc1 = vector_key("local", "envpool", HALF_CHEETAH_POOL_N, threads=1)
    hc2 = vector_key("local", "envpool", HALF_CHEETAH_POOL_N, threads=2)
    targets = [
        Target("CartPole-v1", v32, "bare/native/32", 0.85, "local + vector(native, 32) vs its bare loop"),
        Target("CartPole-v1", v32, local_vec, 2.0, "local + vector(native, 32) vs local + vec(32)"),
        Target("CartPole-v1", v256, "bare/native/256", 0.8, "local + vector(native, 256) vs its bare loop"),
        Target("CartPole-v1", v256, local_vec, 8.0, "local + vector(native, 256) vs local + vec(32)"),
        Target("CartPole-v1", vector_key("multiprocessing", "native", 128, 2), v256, 1.3,
               "multiprocessing 2 x vector(native, 128) vs local + vector(native, 256)"),
    ]
    if not ENVPOOL_INSTALLED:
        return targets
    return targets + [
        Target("CartPole-v1", vector_key("local", "envpool", 256, threads=1), "bare/envpool-t1/256", 0.8,
               "local + vector(envpool, 256) vs its bare loop"),
        Target(HALF_CHEETAH_ID, hc2, hc1, 1.6,
               f"local + vector(envpool, {HALF_CHEETAH_POOL_N}): 2 threads vs 1 thread"),
        Target(HALF_CHEETAH_ID, f"bare/envpool-t2/{HALF_CHEETAH_POOL_N}", f"bare/envpool-t1/{HALF_CHEETAH_POOL_N}",
               1.6, f"bare loop over EnvPool({HALF_CHEETAH_POOL_N}): 2 threads vs 1 thread"),
    ]


# ---------------------------------------------------------------------------------------------- measuring
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


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}x" if x and y and np.isfinite(x) and np.isfinite(y) else ""


TABLE_HEADER = ("| method | N | steps/s | ± | vs local (same worker) | vs SyncVectorEnv (same N) | vs raw random loop "
                "| steps/CPU-s | CPU: vs SyncVectorEnv | CPU: vs raw random |")


def table(results: list[Result]) -> str:
    """The markdown table of one environment."""
    raw = next((r for r in results if r.spec.kind == "raw_random" and not r.error), None)
    sync = {r.spec.n: r for r in results if r.spec.kind == "gym_sync" and not r.error}
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = [TABLE_HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.spec.method} | {r.spec.n} | failed: {r.error} | | | | | | | |")
            continue
        base = sync.get(r.spec.compare_n) if r.spec.compare_n is not None else None
        local = by_key.get(r.spec.vs_local) if r.spec.vs_local else None
        cpu = f"{r.cpu_median:,.0f}" + (" †" if r.multi_process else "") if r.cpu_median else "n/a"
        lines.append(
            f"| {r.spec.method} | {r.spec.n} | {r.median:,.0f} | {r.spread} "
            f"| {_ratio(r.median, local.median if local else None)} "
            f"| {_ratio(r.median, base.median if base else None)} | {_ratio(r.median, raw.median if raw else None)} "
            f"| {cpu} | {_ratio(r.cpu_median, base.cpu_median if base else None)} "
            f"| {_ratio(r.cpu_median, raw.cpu_median if raw else None)} |"
        )
    return "\n".join(lines)


def server_step_table(results: list[Result]) -> str:
    """The action servers' cost of one synchronised step, from their own counters over the whole
    measurement (warm-up included): per worker request, the time the server spends collecting the
    posted observations, batching them, writing the actions back and releasing the worker, with the
    policy's forward pass excluded; and the forward pass itself."""
    lines = []
    for r in results:
        st = r.server_stats
        if r.error or not st or not st["steps"]:
            continue
        overhead = (st["serve_s"] - st["forward_s"]) / st["requests"] * 1e6
        lines.append(f"| {r.spec.method} | {st['steps']:,} | {st['requests'] / st['steps']:.2f} | {overhead:.1f} "
                     f"| {st['forward_s'] / st['steps'] * 1e6:.1f} |")
    if not lines:
        return ""
    return "\n".join(["| row | batched forward passes | workers per pass | server step cost per worker, forward "
                      "excluded (µs) | forward pass (µs) |", "|---|---:|---:|---:|---:|", *lines])


def targets_table(env_id: str, results: list[Result], targets: list[Target]) -> str:
    """Which speed targets of ``env_id`` this run meets (empty when none applies)."""
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = []
    for t in targets:
        if t.env_id != env_id:
            continue
        row, base = by_key.get(t.row), by_key.get(t.base)
        if row is None or base is None:
            lines.append(f"| {t.label} | >= {t.minimum:g}x | not measured | | |")
            continue
        ratio = row.median / base.median
        # the two rows measured in the same round (a few seconds apart), round by round
        rounds = [a / b for a, b in zip(row.rates, base.rates)]
        spread = f"{min(rounds):.2f}x to {max(rounds):.2f}x" if len(rounds) > 1 else ""
        lines.append(f"| {t.label} | >= {t.minimum:g}x | {ratio:.2f}x ({row.median:,.0f} / {base.median:,.0f} "
                     f"steps/s) | {spread} | {'yes' if ratio >= t.minimum else '**no**'} |")
    if not lines:
        return ""
    return "\n".join(["| speed target | required | measured (ratio of medians) | same-round ratios | met |",
                      "|---|---:|---:|---:|---|", *lines])


def vector_floor_table(results: list[Result]) -> str:
    """Each local ``worker=vector`` row over the bare loop with the same VectorEnv and policy (its floor)."""
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = []
    for r in results:
        if r.error or r.spec.kind != "corral_vector" or not r.spec.key.startswith("local/"):
            continue
        backend = r.spec.key.split("/")[1].removeprefix("vector-").removesuffix("-frag")
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


def step_parts_table(results: list[Result], n: int = 32, sync_target: float = 1.3) -> str:
    """Where the time of one step of ``n`` environments goes, and what that allows.

    Every in-process row's steps/s becomes microseconds per step of all ``n`` environments. E (the
    ``env.step`` calls) and P (one ``get_actions`` call) are measured alone; the floor,
    SyncVectorEnv(n) and corral's ``local + vec(n)`` make the same calls plus their own machinery
    (their time - E - P). A loop that makes these calls takes at least E + P, so its ratio to
    SyncVectorEnv(n) is at most S / (E + P) however little else it does: the lines under the
    table compare that with ``sync_target`` (issue 2's target). Empty when a needed row is missing.
    """
    found: dict[str, Result] = {}
    for r in results:
        if not r.error and r.spec.n == n and r.median > 0:
            found.setdefault(r.spec.kind, r)
    corral = next((r for r in results if not r.error and r.spec.key == corral_key("local", "vec", n)), None)
    if corral is not None and corral.median > 0:
        found["corral_vec"] = corral
    if any(kind not in found for kind in ("gym_sync", "env_steps", "policy_only")):
        return ""

    def us(kind: str) -> float:
        return n / found[kind].median * 1e6

    e, p, s = us("env_steps"), us("policy_only"), us("gym_sync")
    labels = [("env_steps", "E: env.step calls"), ("env_unwrapped", "E_u: env.unwrapped.step calls"),
              ("policy_only", f"P: one policy.get_actions call (batch {n})"), ("floor", "floor: minimal loop"),
              ("gym_sync", f"gym SyncVectorEnv({n}) + policy"), ("corral_vec", f"corral local + vec({n})")]
    lines = [f"| part or row | µs per step of {n} environments | beyond E + P (µs) |", "|---|---:|---:|"]
    for kind, label in labels:
        if kind in found:
            beyond = f"{us(kind) - e - p:+.1f}" if kind in ("floor", "gym_sync", "corral_vec") else ""
            lines.append(f"| {label} | {us(kind):.1f} | {beyond} |")
    lines += [
        "",
        f"- {sync_target:g}x SyncVectorEnv({n}) leaves {s / sync_target:.1f} µs per step of {n} environments; "
        f"E + P alone take {e + p:.1f} µs.",
        f"- So a loop that calls these environments' `step` and this policy once per step reaches at most "
        f"S / (E + P) = {s / (e + p):.2f}x SyncVectorEnv({n}), whatever else it leaves out.",
    ]
    if "env_unwrapped" in found:
        eu = us("env_unwrapped")
        lines.append(f"- Calling `env.unwrapped.step` (no TimeLimit, OrderEnforcing or PassiveEnvChecker) would "
                     f"raise that bound to S / (E_u + P) = {s / (eu + p):.2f}x.")
    if "corral_vec" in found:
        lines.append(f"- corral local + vec({n}): {s / us('corral_vec'):.2f}x SyncVectorEnv({n}), "
                     f"{(e + p) / us('corral_vec'):.2f}x the bound's E + P.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- call cost
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
                                      {"device": SERVER_DEVICE}))
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


# ---------------------------------------------------------------------------------------------- run
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="gymnasium ids (default: %(default)s)")
    p.add_argument("--heavy-envs", nargs="*", default=["CartPole-v1"],
                   help="environments measured again with the heavier policy (MLP 512x512) and the rows where "
                        "batching matters (default: %(default)s; none: skip)")
    p.add_argument("--quick", action="store_true", help="small budget and batch (smoke test)")
    p.add_argument("--budget", type=float, default=None, help="seconds per measurement (default 2.0; quick 0.1)")
    p.add_argument("--repeats", type=int, default=None, help="measurements per row (default 5; quick 1)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up seconds per row (default 0.5; quick 0)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="steps per obtain_samples call (default 4096; quick 256)")
    p.add_argument("--calls", type=int, default=None,
                   help="timed calls per sampler for the per-call cost table (default 200; quick 5; 0: skip it)")
    p.add_argument("--rows", nargs="+", default=None, metavar="KEY",
                   help="only rows (and per-call-cost samplers) whose key contains one of these, e.g. "
                        "'ray' 'local/vec/1x32' 'gym_async' (keys: see --list)")
    p.add_argument("--no-ray", action="store_true", help="leave out the Ray rows (no Ray runtime is started)")
    p.add_argument("--list", action="store_true", help="print the row keys and exit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--note", default="", help="a line written under the header (e.g. what else was running)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown output (default: %(default)s)")
    args = p.parse_args(argv)
    q = args.quick
    args.budget = args.budget if args.budget is not None else (0.1 if q else 2.0)
    args.repeats = args.repeats if args.repeats is not None else (1 if q else 5)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if q else 0.5)
    args.batch_size = args.batch_size if args.batch_size is not None else (256 if q else 4096)
    args.calls = args.calls if args.calls is not None else (5 if q else 200)
    return args


NOTES = """Notes:
- Start-up is never measured: every row is built (worker processes spawned, Ray actors placed, \
AsyncVectorEnv processes started) and warmed up before measuring starts; samplers are called with a \
fresh parameter update every call, as a trainer does.
- vs local (same worker): a parallel sampler's steps/s over the local sampler's with one worker of the \
same type and the same total number of environments (2 x vec(16) vs one vec(32)); for the default worker, \
which steps one environment at a time, the baseline is the one-worker local row (the `local + default \
(2 workers)` row shows that a second local worker, run after the first, gives the same rate).
- gym AsyncVectorEnv "2 procs x SyncVectorEnv(16)": gymnasium's AsyncVectorEnv runs one sub-environment \
per process, so 2 processes x 16 environments is an AsyncVectorEnv over 2 sub-environments that are \
each a SyncVectorEnv of 16 (outer autoreset disabled, inner NEXT_STEP); the main process makes one \
batched policy call for all 32 per step; the inner envs' infos are not passed up (gymnasium's outer \
vector env cannot merge array infos such as HalfCheetah's), which saves gymnasium's row the outer merge. \
"32 procs" is the plain form (32 processes, 1 environment \
each). Processes start with the forkserver method.
- steps/CPU-s: for rows marked † the CPU time is this process's plus the row's worker processes' \
(and for Ray rows every Ray runtime process: raylet, GCS, idle workers), read from /proc; it is the \
machine's total CPU cost per step, not a speed.
- Ray: the Ray rows are measured after all the others, which run with no Ray runtime alive (its \
raylet, GCS and idle workers take CPU that a user of the other samplers never pays); then one runtime, \
`ray.init(address="local", num_cpus=2, include_dashboard=False)`, serves every Ray row (round-robin \
among themselves) and is shut down at the end; its background CPU counts against the Ray rows. Actors reserve num_cpus=0.5 each (a scheduling \
number only, so that both Ray rows of a table exist at once on 2 CPUs; actors use 1 torch thread).
- Action servers run with their default `spin_us=200`: a waiting worker (and the server) polls for its \
answer for up to 200 µs, yielding the CPU between polls, before sleeping on its semaphore. The polling \
CPU counts in their steps/CPU-s."""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and write them to ``--out``."""
    args = parse_args(argv)
    rows = select(default_rows(), args.rows, args.no_ray)
    specs = select(call_cost_specs(), args.rows, args.no_ray) if args.calls > 0 else []
    if args.list:
        print("\n".join(f"{r.key:32s} {r.method} (N={r.n})" for r in default_rows()))
        return 0
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
        "policy MLPPolicy 64x64 tanh (stochastic; 512x512 in the tables that say so), torch threads 1, "
        f"action-server rows on device={SERVER_DEVICE}.",
        "",
        "Columns: steps/s is environment steps per wall-clock second (median over repeats; rows are "
        "measured round-robin); ± is half the range of the repeats, in percent of the median. steps/CPU-s divides by CPU time instead, which other processes on a "
        "shared machine disturb much less († = summed over several processes, see the notes). "
        "Ratios are between medians of this run.",
        "",
        NOTES,
    ]
    if args.note:
        header += ["", args.note]
    print("\n".join(header), flush=True)
    sections = []
    targets = default_targets()
    ray = None
    try:
        heavy_rows = [r for r in rows if r.key in HEAVY_ROW_KEYS]
        tables = [(env_id, env_id, (64, 64), rows_for(env_id, rows)) for env_id in args.envs]
        tables += [(heavy_label(env_id, HEAVY_HIDDEN), env_id, HEAVY_HIDDEN, heavy_rows)
                   for env_id in args.heavy_envs if heavy_rows]
        # Two phases: every row but Ray's with no Ray runtime running (its raylet, GCS and idle
        # workers take CPU a user of the other samplers never pays), then the Ray runtime is started
        # once for the Ray rows of every table and the Ray per-call costs.
        measured: dict[str, list[Result]] = {}
        seconds: dict[str, float] = {}
        costs: list[CallCost] = []
        for phase in ("without Ray", "Ray"):
            phase_rows = [(label, env_id, hidden, [r for r in t_rows if (r.sampler == "ray") == (phase == "Ray")])
                          for label, env_id, hidden, t_rows in tables]
            phase_specs = [spec for spec in specs if (spec.sampler == "ray") == (phase == "Ray")]
            if not any(r for *_, r in phase_rows) and not phase_specs:
                continue
            if phase == "Ray":
                ray = start_ray()
            for label, env_id, hidden, table_rows in phase_rows:
                if not table_rows:
                    continue
                print(f"\nmeasuring {label} ({phase}) ...", flush=True)
                ctx = BenchContext(env_id=env_id, seed=args.seed, batch_size=args.batch_size, hidden_sizes=hidden)
                t0 = time.perf_counter()
                measured.setdefault(label, []).extend(measure(ctx, table_rows, args.budget, args.warmup, args.repeats))
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t0
            if phase_specs:
                print(f"\nmeasuring the fixed cost of one obtain_samples call ({args.calls} calls each, {phase}) ...",
                      flush=True)
            for spec in phase_specs:
                try:
                    costs.append(measure_call_cost(spec, args.seed, args.calls))
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    costs.append(CallCost(spec, error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300]))
        for label, _env_id, _hidden, table_rows in tables:
            if label not in measured:
                continue
            order = {id(spec): k for k, spec in enumerate(table_rows)}
            results = sorted(measured[label], key=lambda res: order[id(res.spec)])
            text = f"## {label}\n\n{table(results)}\n\n({seconds[label]:.0f} s for this table)"
            st = server_step_table(results)
            if st:
                text += f"\n\nAction servers' synchronised step ({label}):\n\n{st}"
            tt = targets_table(label, results, targets)
            if tt:
                text += f"\n\nSpeed targets (issues 2, 4, 5 and 20) on {label}:\n\n{tt}"
            vt = vector_floor_table(results)
            if vt:
                text += f"\n\nworker=vector beside its floor ({label}):\n\n{vt}"
            parts = step_parts_table(results)
            if parts:
                text += f"\n\nWhere one step of 32 environments goes ({label}):\n\n{parts}"
            print("\n" + text, flush=True)
            sections.append(text)
        if specs:
            order = {id(spec): k for k, spec in enumerate(specs)}
            costs.sort(key=lambda cost: order[id(cost.spec)])
            update_kb = max((c.update_bytes for c in costs), default=0) / 1024
            text = (
                "## Fixed cost of one obtain_samples call\n\n"
                f"Method: each sampler is built on {CALL_COST_ENV} with `max_episode_length=1` and called "
                f"`obtain_samples(itr, 1, update)` {args.calls} times after 5 warm-up calls: every worker resets its "
                "environments and takes one step each (one 1-step episode per environment), so a call is almost "
                "only the per-call machinery: the agent update (`policy.get_param_values()`, "
                f"{update_kb:.1f} KiB pickled) shipped and loaded, the request, the episodes sent back and "
                "concatenated. Calls with `update=None` alternate with them; the difference is the update's "
                "share. Median and 90th percentile over the calls (start-up excluded). The local rows are the "
                "in-process floor (the sampling itself).\n\n" + call_cost_table(costs)
            )
            print("\n" + text, flush=True)
            sections.append(text)
    finally:
        if ray is not None:
            ray.shutdown()
    left = leftovers()
    footer = (f"finished {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {machine_info()}\n\n"
              f"processes and shared-memory segments left after shutdown: {'; '.join(left) if left else 'none'}")
    print("\n" + footer)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(header) + "\n\n" + "\n\n".join(sections) + "\n\n" + footer + "\n")
        print(f"wrote {args.out}")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
