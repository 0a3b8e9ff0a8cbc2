"""Building a ``gymnasium.vector.VectorEnv`` of ``n`` environments from an environment source and a backend.

The backends: ``native`` (the id's own vector entry point), ``envpool`` (EnvPool, imported only when
asked for), ``sync``/``async`` (gymnasium's Sync/AsyncVectorEnv over the env preset), and a source
that makes its own VectorEnv. ``worker=vector`` steps what this module builds; the sampling benchmark
builds its bare-loop floors with it, so both step the very same VectorEnv.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState

from corral.framework.env import EnvFactory, gym_spec, make_env
from corral.framework.errors import ConfigError, WorkerError
from corral.framework.memory import check_room_for_processes
from corral.framework.video import RecordedEnvFactory

#: The ``worker.backend`` choices.
BACKENDS = ("native", "envpool", "sync", "async")
#: The least memory one environment process of ``worker.backend=async`` takes, in MiB: a fork of the
#: worker (CartPole: about 11 MiB proportional set size each, 180 MiB resident, most of it shared).
ASYNC_ENV_PROCESS_MIB = 10
#: ``worker.autoreset_mode`` names and the gymnasium modes they stand for.
AUTORESET_MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                   "disabled": AutoresetMode.DISABLED}


def _env_id(source: Any) -> tuple[str, dict[str, Any]] | None:
    """``(id, kwargs)`` of a source naming a gymnasium id, else None."""
    if isinstance(source, str):
        return source, {}
    if isinstance(source, EnvFactory) and isinstance(source.fn, str):
        return source.fn, dict(source.kwargs)
    return None


def _own_vector_env(source: Any, n_envs: int) -> VectorEnv | None:
    """The VectorEnv a source makes itself (a plugin's own vectorised environment), else None.

    A callable (or an :class:`EnvFactory` of one) whose signature takes ``num_envs`` is called with
    ``num_envs=n_envs``."""
    if isinstance(source, VectorEnv):
        return source
    fn, kwargs = (source.fn, dict(source.kwargs)) if isinstance(source, EnvFactory) else (source, {})
    if isinstance(fn, str) or not callable(fn) or isinstance(fn, gym.Env):
        return None
    try:
        if "num_envs" in inspect.signature(fn).parameters:
            kwargs.setdefault("num_envs", n_envs)
    except (TypeError, ValueError):
        pass
    made = fn(**kwargs)
    if isinstance(made, VectorEnv):
        return made
    if hasattr(made, "close"):
        made.close()
    return None


def _limited_env(source: Any, limit: int | None) -> gym.Env:
    """One sub-environment of the sync/async backends, cut at ``limit`` steps by a TimeLimit."""
    env = make_env(source)
    own = getattr(env.spec, "max_episode_steps", None)
    if limit is not None and (own is None or limit < own):
        env = gym.wrappers.TimeLimit(env, max_episode_steps=limit)
    return env


def _async_env(source: Any, limit: int | None, owner_pid: int) -> gym.Env:
    """:func:`_limited_env` for the async backend. In an environment process (not ``owner_pid``, the
    worker's process, where AsyncVectorEnv makes one environment to read its spaces) SIGINT is ignored
    and SIGTERM is at its default: the worker stops these processes itself, and a Ctrl-C, which reaches
    the whole process group, ended them under the worker, whose shutdown then failed on their broken
    pipes."""
    import os
    import signal

    if os.getpid() != owner_pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the worker's handler, inherited by fork: the worker's
        # terminate() ends the process at once, without a traceback of a stop request inside gymnasium's loop
    return _limited_env(source, limit)


def _async_worker(*args: Any) -> None:
    """gymnasium's loop of an environment process of ``worker.backend=async``, which exits without a
    word when its worker's process is gone (its pipe broken: the process was killed or crashed): there
    is no one to tell, and gymnasium's loop printed two tracebacks per process under that process's own
    one line."""
    from gymnasium.vector.async_vector_env import _async_worker as loop

    try:
        loop(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass


def _own_limit(venv: VectorEnv) -> int | None:
    """A VectorEnv's own episode limit: its spec's, its ``max_episode_steps`` or its sub-environments' specs'."""
    limit = getattr(getattr(venv, "spec", None), "max_episode_steps", None) or getattr(venv, "max_episode_steps", None)
    if limit is None and isinstance(venv, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
        limits = [getattr(spec, "max_episode_steps", None) for spec in venv.get_attr("spec")]
        known = [int(x) for x in limits if x is not None]
        limit = max(known) if known and len(known) == len(limits) else None
    return limit


#: The one line for recording videos (``--video``, ``trainer.video_every``) with a backend that makes
#: its environments all at once, so none can be wrapped in a recorder.
RECORDING_NEEDS_SYNC = ("worker.backend={backend} makes all its environments inside one VectorEnv, so corral cannot "
                        "record them one by one; record with worker.backend=sync (the same environments through "
                        "gymnasium's SyncVectorEnv): train with it for trainer.video_every, or evaluate a trained run "
                        "with corral eval <run> --video DIR worker.backend=sync")


def needs_id_message(backend: str, what: str) -> str:
    """The one line for ``worker.backend=native`` or ``envpool`` with an environment that is not a
    gymnasium id (``what``: the environment, e.g. ``env=point_nav``)."""
    return (f"worker.backend={backend} makes its environments from a gymnasium id, but {what} is not one (it makes "
            "its environments itself); use worker.backend=sync (or async) for it")


def check_source(source: Any, backend: str, what: str) -> None:
    """Raise the one-line :class:`ConfigError` that :func:`build_vector_env` would raise for
    ``source`` and ``backend``, without making the VectorEnv: ``native`` and ``envpool`` need a
    gymnasium id they can make (:func:`check_backend`) unless the source makes its own VectorEnv
    (probed with one environment, then closed). ``what`` names the source in the message."""
    check_backend(backend)
    ident = _env_id(source)
    if ident is not None:
        check_backend(backend, *ident)
        return
    if backend in ("native", "envpool"):
        own = _own_vector_env(source, 1)
        if own is None:
            raise ConfigError(needs_id_message(backend, what))
        own.close()


def native_ids() -> list[str]:
    """The gymnasium ids that have a vector entry point (``worker.backend=native`` can make them)."""
    return sorted(i for i, s in gym.registry.items() if s.vector_entry_point is not None)


def min_limit(*limits: int | None) -> int | None:
    """The shortest of the given episode limits (None and 0 mean no limit); None when none is given."""
    given = [int(x) for x in limits if x]
    return min(given) if given else None


@dataclass
class BuiltVectorEnv:
    """A VectorEnv :func:`build_vector_env` made, with what the worker needs to know about it."""

    venv: VectorEnv
    own_limit: int | None  # the VectorEnv's own episode limit (it truncates there itself)
    seed_list: bool  # reset(seed=[...]) gives every slot its own stream
    restorable: bool  # the environments' RNG state can be saved and restored
    backend: str  # what was really built (``own`` for a source's own VectorEnv)


#: EnvPool settings that ``worker=vector`` sets itself, and the setting a user gives instead.
ENVPOOL_SET_BY_WORKER = {"num_envs": "worker.n_envs", "batch_size": "worker.n_envs", "seed": "seed",
                         "num_threads": "worker.num_threads"}
#: EnvPool settings of every environment that are its own plumbing, not the environment's.
_ENVPOOL_PLUMBING = ("max_num_players", "thread_affinity_offset", "base_path", "env_seed", "gym_reset_return_info",
                     "version")


def check_backend(backend: str, env_id: str | None = None, kwargs: Mapping[str, Any] | None = None) -> None:
    """Raise a one-line :class:`ConfigError` when ``worker.backend`` is not one of :data:`BACKENDS`,
    or cannot make the gymnasium id ``env_id``: ``native`` for an id without a vector entry point,
    ``envpool`` without EnvPool, for an id EnvPool lacks, or with an ``env.kwargs`` key (``kwargs``)
    EnvPool's environment does not take (gymnasium's ``Pendulum-v1`` takes ``g``, EnvPool's does not).
    An id gymnasium does not know is left to whoever makes the environment. ``worker=vector``'s
    config check and :func:`build_vector_env` both call it, so they say the same."""
    if backend not in BACKENDS:
        raise ConfigError(f"worker.backend={backend!r} is not one of {', '.join(BACKENDS)}")
    if env_id is None:
        return
    if backend == "native":
        try:
            spec = gym_spec(env_id)
        except gym.error.Error:
            return
        if spec.vector_entry_point is None:
            raise ConfigError(
                f"{env_id} has no vector entry point, so worker.backend=native cannot make it; ids that have one: "
                f"{', '.join(native_ids())}. Use worker.backend=sync (or async, or envpool) for {env_id}")
    elif backend == "envpool":
        try:
            import envpool
        except ImportError as exc:
            raise ConfigError("worker.backend=envpool needs EnvPool: pip install 'corral[envpool]'") from exc
        if env_id not in envpool.list_all_envs():
            raise ConfigError(f"EnvPool has no environment {env_id!r}; use worker.backend=sync for it "
                              f"(EnvPool's ids: {', '.join(envpool.list_all_envs())})")
        fields = envpool.make_spec(env_id).config._fields
        for key in kwargs or {}:
            if key in ENVPOOL_SET_BY_WORKER:
                raise ConfigError(f"env.kwargs.{key}: worker=vector sets EnvPool's {key} itself; give "
                                  f"{ENVPOOL_SET_BY_WORKER[key]} instead")
            if key not in fields:
                takes = [f for f in fields if f not in ENVPOOL_SET_BY_WORKER and f not in _ENVPOOL_PLUMBING]
                raise ConfigError(f"env.kwargs.{key}: EnvPool's {env_id} does not take {key!r} (it takes "
                                  f"{', '.join(takes)}); gymnasium's own keyword arguments need worker.backend=sync "
                                  "(or async)")


def async_in_daemon_message(sampler: str) -> str:
    """The one line for ``worker.backend=async`` under a sampler whose workers run in daemon processes,
    which cannot start the environment processes (``sampler``: the sampler, e.g. ``sampler=multiprocessing``).
    ``worker=vector``'s config check says it before anything starts; :func:`build_vector_env` again,
    for a worker built in such a process outside a run."""
    return (f"{sampler} runs each worker in a daemon process, which cannot start processes of its own, but "
            "worker=vector with worker.backend=async starts one per environment; use worker.backend=sync (the same "
            "environments, stepped in the worker's process), or sampler=local or sampler=ray to keep "
            "worker.backend=async")


def check_room_for_async_envs(n_envs: int) -> None:
    """Raise a one-line :class:`ConfigError` when ``worker.backend=async``'s ``n_envs`` environment
    processes cannot fit in the memory still available (at :data:`ASYNC_ENV_PROCESS_MIB` each).
    ``worker=vector``'s config check calls it before anything starts, and every worker again before
    it starts its processes, when the memory the other workers took is no longer available."""
    check_room_for_processes(n_envs, ASYNC_ENV_PROCESS_MIB, "worker.n_envs",
                             "environment processes (worker.backend=async)",
                             "each is a copy of its worker's process that steps one environment",
                             "give fewer, or worker.backend=sync (or native), which step them in the worker's "
                             "process")


def build_vector_env(source: Any, *, backend: str, n_envs: int, max_episode_length: int | None,
                     seed: int, num_threads: int = 0, autoreset_mode: str = "next_step",
                     step_timeout: float | None = None) -> BuiltVectorEnv:
    """The VectorEnv of ``n_envs`` environments that ``backend`` makes from ``source``.

    ``max_episode_length`` is passed to the backend as its time limit where it is shorter than
    the environment's own, so the backend truncates there itself; ``seed`` seeds EnvPool (which
    seeds environment ``i`` with ``seed + i``). ``step_timeout``: the seconds an ``async`` step may
    take (:class:`BoundedAsyncVectorEnv`; None: no limit).
    """
    check_backend(backend)
    own = _own_vector_env(source, n_envs) if _env_id(source) is None else None
    if own is not None:
        if own.num_envs != n_envs:
            own.close()
            raise ConfigError(f"the environment made its own VectorEnv of {own.num_envs} environments but "
                              f"worker.n_envs={n_envs}; set worker.n_envs={own.num_envs}")
        if num_threads or str(autoreset_mode).lower() != "next_step":
            own.close()
            raise ConfigError("the environment made its own VectorEnv, which corral takes as it is: worker.num_threads "
                              "and worker.autoreset_mode do not apply to it; leave them at their defaults")
        return BuiltVectorEnv(own, _own_limit(own), False, True, "own")
    ident = _env_id(source)
    if backend in ("native", "envpool") and isinstance(source, RecordedEnvFactory):
        raise ConfigError(RECORDING_NEEDS_SYNC.format(backend=backend))
    if backend in ("native", "envpool") and ident is None:
        raise ConfigError(needs_id_message(backend, f"the environment source {source!r}"))
    if backend == "native":
        assert ident is not None
        env_id, kwargs = ident
        try:
            spec = gym_spec(env_id)
        except gym.error.Error as exc:
            raise ConfigError(f"gymnasium has no environment {env_id!r} ({exc}); check env.id") from exc
        check_backend(backend, env_id)
        own_limit = kwargs.get("max_episode_steps") or spec.max_episode_steps
        if own_limit is not None:  # the vector entry point takes max_episode_steps (make_vec passes it)
            own_limit = kwargs["max_episode_steps"] = min_limit(max_episode_length, own_limit)
        venv = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="vector_entry_point", **kwargs)
        return BuiltVectorEnv(venv, own_limit, False, True, "native")
    if backend == "envpool":
        assert ident is not None
        env_id, kwargs = ident
        check_backend(backend, env_id, kwargs)
        import envpool

        own_limit = kwargs.get("max_episode_steps") or envpool.make_spec(env_id).config.max_episode_steps
        limit = min_limit(max_episode_length, own_limit)
        if limit is not None:
            kwargs["max_episode_steps"] = limit
        pool: Any = envpool.make(env_id, env_type="gymnasium", num_envs=n_envs, batch_size=n_envs, seed=seed % 2**31,
                                 num_threads=num_threads, **kwargs)  # a VectorEnv (EnvPool's gymnasium mixin)
        # EnvPool builds its spaces on first use (and keeps them): float32 Boxes from float64 bounds, on
        # which gymnasium warns each time, with nothing for the user to do.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
            pool.observation_space, pool.action_space  # noqa: B018 - built here, under the filter
        return BuiltVectorEnv(pool, limit, False, False, "envpool")
    # sync / async over the env preset
    mode = AUTORESET_MODES.get(str(autoreset_mode).lower())
    if mode is None:
        raise ConfigError(f"worker.autoreset_mode={autoreset_mode!r} is not one of {', '.join(AUTORESET_MODES)}")
    # The probe reads the time limit; a recording source's probe would take slot 0's video name.
    plain: Any = source.fn if isinstance(source, RecordedEnvFactory) else source
    probe = make_env(plain) if ident is None else make_env(EnvFactory(*ident))
    try:
        own_limit = getattr(probe.spec, "max_episode_steps", None)
    finally:
        probe.close()
    limit = min_limit(max_episode_length, own_limit)
    # A recording source records slot j as slot j: counting the environments it makes numbered every
    # async process after the one AsyncVectorEnv makes here first (each process a copy: all slot 1).
    sources = [source.for_slot(j) if isinstance(source, RecordedEnvFactory) else source for j in range(n_envs)]
    if backend == "async":
        import os

        fns = [functools.partial(_async_env, s, limit, os.getpid()) for s in sources]
    else:
        fns = [functools.partial(_limited_env, s, limit) for s in sources]
    if backend == "sync":
        venv = gym.vector.SyncVectorEnv(fns, copy=False, autoreset_mode=mode)
    else:
        import multiprocessing

        if multiprocessing.current_process().daemon:  # the config check refuses a run's such sampler before this
            raise ConfigError(async_in_daemon_message("the sampler"))
        check_room_for_async_envs(n_envs)
        venv = BoundedAsyncVectorEnv(fns, copy=False, autoreset_mode=mode, worker=_async_worker)
        venv.step_timeout = step_timeout
    return BuiltVectorEnv(venv, limit, True, True, backend)


class StepTimedOut(WorkerError):
    """An environment process of ``worker.backend=async`` did not answer a step within ``worker.step_timeout``."""


class BoundedAsyncVectorEnv(gym.vector.AsyncVectorEnv):
    """gymnasium's AsyncVectorEnv whose ``step`` waits at most ``step_timeout`` seconds (None: no
    limit) for its environment processes; one that has not answered by then is a
    :class:`StepTimedOut` naming its slot and pid (its step hangs: a deadlock, a simulator waiting
    on something). Under ``sampler=local`` nothing else bounds that wait."""

    step_timeout: float | None = None

    def step(self, actions: Any) -> Any:
        """Step every environment; :class:`StepTimedOut` when one takes longer than ``step_timeout``."""
        import multiprocessing

        self.step_async(actions)
        try:
            return self.step_wait(timeout=self.step_timeout)
        except multiprocessing.TimeoutError:
            self._state = AsyncState.WAITING_STEP  # answers are pending: the worker's shutdown ends the processes
            stuck = [i for i, pipe in enumerate(self.parent_pipes) if pipe is not None and not pipe.poll()]
            slots = [f"slot {i} (pid {self.processes[i].pid})" for i in stuck] or ["a slot"]
            named = " and ".join([", ".join(slots[:-1]), slots[-1]] if len(slots) > 1 else slots)
            raise StepTimedOut(
                f"worker.backend=async: environment {named} did not answer a step within worker.step_timeout="
                f"{self.step_timeout:g} s (its step hangs); fix the environment, or raise worker.step_timeout "
                "for one that is this slow") from None


def autoreset_mode_of(venv: VectorEnv) -> AutoresetMode:
    """The VectorEnv's autoreset mode (gymnasium's default, NEXT_STEP, when it does not say)."""
    mode = (getattr(venv, "metadata", None) or {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        return AUTORESET_MODES[str(mode).lower()]
