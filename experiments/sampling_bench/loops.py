"""Loops and floors: raw gymnasium loops, the minimal loop and its parts, gymnasium's vector envs with
one batched policy call per step, and the bare loop over a worker=vector VectorEnv."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from .harness import BenchContext, _InProcess, _make_gym_env, _timed_loop
from .settings import ASYNC_CONTEXT


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
    worker's own :func:`~corral.framework.vector_env.build_vector_env`) with the same policy, one
    batched ``get_actions`` and one ``step`` call per step, nothing recorded (NEXT_STEP reset steps
    not counted)."""

    def __init__(self, ctx: BenchContext, backend: str, n_envs: int, num_threads: int = 0) -> None:
        from corral.framework.env import EnvFactory
        from corral.framework.vector_env import build_vector_env

        venv = build_vector_env(EnvFactory(ctx.env_id), backend=backend, n_envs=n_envs, max_episode_length=None,
                                seed=ctx.seed, num_threads=num_threads).venv
        super().__init__(venv, ctx.make_policy(n_envs), n_envs, ctx.seed, n_envs)
