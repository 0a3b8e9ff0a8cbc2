"""The Sampler contract: hand work to workers, gather their EpisodeBatches."""

from __future__ import annotations

import atexit
import math
import weakref
from abc import ABCMeta, abstractmethod
from typing import Any, Mapping

from corral.framework.batch import EpisodeBatch, nonfinite_values
from corral.framework.errors import EnvironmentValueError
from corral.framework.interrupts import hold_while_stopping, stopping_notice
from corral.framework.worker import Worker, WorkerFactory


def split_steps(num_samples: int, n_workers: int) -> list[int]:
    """Each worker's share of ``num_samples`` steps (the same split for every sampler)."""
    share = math.ceil(num_samples / n_workers)
    return [share] * n_workers


def collect_share(worker: Worker, share: int) -> EpisodeBatch:
    """Whole episodes from ``worker`` totalling at least ``share`` steps (every sampler's loop).
    Raises :class:`~corral.framework.errors.EnvironmentValueError` naming the worker when they hold
    NaN or infinite observations or rewards (:func:`check_finite`)."""
    batches = []
    got = 0
    while got < share:
        batch = worker.rollout(min_steps=share - got)
        batches.append(batch)
        got += len(batch)
    return check_finite(worker, EpisodeBatch.concatenate(*batches), "sampling (obtain_samples)")


def check_finite(worker: Worker, batch: EpisodeBatch, activity: str) -> EpisodeBatch:
    """``batch``, sampled by ``worker`` while ``activity``; an
    :class:`~corral.framework.errors.EnvironmentValueError` that names the worker, as every worker
    failure line does, when it holds NaN or infinite observations or rewards (an environment whose
    state blew up): ``worker 1's environment EnvFactory(...) returned values no algorithm can learn
    from (observations: NaN in ...) while sampling (obtain_samples); ...``. Every sampler passes it
    on as it is (a restart would not help: the run stops, as the trainer's own check stops it)."""
    bad = nonfinite_values(batch)
    if bad is None:
        return batch
    env = worker.env_source if worker.env_source is not None else (worker.envs[0] if worker.envs else None)
    what = f"environment {env!r}" if env is not None else "environment"
    raise EnvironmentValueError(
        f"worker {worker.worker_number}'s {what} returned values no algorithm can learn from ({bad}) while "
        f"{activity}; the run stopped before training on them: check the environment, or wrap it to end an "
        "episode whose state blew up")


class _BuiltThenHooked(ABCMeta):
    """Registers a sampler's interpreter-exit shutdown once its ``__init__`` has returned: a sampler
    whose construction raised holds nothing a shutdown could free (its own ``__init__`` cleans up
    what it started), and its ``_shutdown`` would meet attributes that were never set."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        sampler = super().__call__(*args, **kwargs)
        sampler._register_exit_shutdown()
        return sampler


class Sampler(metaclass=_BuiltThenHooked):
    """Collects episodes with ``n_workers`` workers built from a :class:`WorkerFactory`.

    Build one from parameters, as in garage::

        LocalSampler(agents=policy, envs=env, max_episode_length=100, n_workers=4,
                     worker_class=VecWorker, worker_args=dict(n_envs=12))

    or from a factory: ``LocalSampler.from_worker_factory(WorkerFactory(...), agents, envs)``.
    ``agents`` and ``envs`` are one object (broadcast to every worker) or a list of exactly
    ``n_workers`` (one per worker).

    Contract: ``obtain_samples`` returns whole episodes totalling at least ``num_samples`` steps,
    split evenly over workers and returned in worker order; ``obtain_exact_episodes`` returns
    exactly ``n`` episodes per worker, in worker order. Same seed, worker type and number of
    workers: same episodes, whatever the sampler. ``shutdown_worker`` is idempotent and also runs
    on ``with`` exit and, for a sampler whose construction finished, at interpreter exit. A
    subclass whose ``__init__`` fails frees what it had started before raising.
    """

    #: True for a sampler that runs each worker in a daemon process (``multiprocessing``'s
    #: ``daemon=True``), which cannot start processes of its own: a worker that would (``worker=vector``
    #: with ``worker.backend=async``) is refused by its config check before anything starts
    #: (:func:`runs_workers_in_daemon_processes` reads it from a registered option).
    workers_in_daemon_processes: bool = False

    def __init__(
        self,
        agents: Any,
        envs: Any,
        *,
        worker_factory: WorkerFactory | None = None,
        max_episode_length: int | None = None,
        seed: int | None = None,
        n_workers: int = 1,
        worker_class: type[Worker] | None = None,
        worker_args: Mapping[str, Any] | None = None,
    ) -> None:
        if worker_factory is None:
            worker_factory = WorkerFactory(
                seed=seed,
                max_episode_length=max_episode_length,
                n_workers=n_workers,
                worker_class=worker_class,
                worker_args=dict(worker_args or {}),
            )
        self.worker_factory = worker_factory
        self.total_env_steps = 0
        self._closed = False
        self._atexit: Any = None

    def _register_exit_shutdown(self) -> None:
        """Shut this sampler down at interpreter exit unless it was shut down before (called once
        its construction has finished)."""
        if self._closed or self._atexit is not None:
            return
        ref = weakref.ref(self)

        def shutdown_at_exit() -> None:
            sampler = ref()
            if sampler is not None:
                sampler.shutdown_worker()

        self._atexit = shutdown_at_exit
        atexit.register(self._atexit)

    @classmethod
    def from_worker_factory(cls, worker_factory: WorkerFactory, agents: Any, envs: Any, **options: Any) -> "Sampler":
        """Build this sampler from a factory; ``options`` are the sampler's own settings."""
        return cls(agents, envs, worker_factory=worker_factory, **options)

    @property
    def n_workers(self) -> int:
        """Number of workers."""
        return self.worker_factory.n_workers

    @abstractmethod
    def obtain_samples(
        self, itr: int, num_samples: int, agent_update: Any, env_update: Any = None
    ) -> EpisodeBatch:
        """Whole episodes totalling at least ``num_samples`` steps, all from ``agent_update``."""

    @abstractmethod
    def obtain_exact_episodes(
        self, n_eps_per_worker: int, agent_update: Any, env_update: Any = None
    ) -> EpisodeBatch:
        """Exactly ``n_eps_per_worker`` episodes from each worker, in worker order."""

    def shutdown_worker(self) -> None:
        """Stop the workers and free what they hold. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._atexit is not None:
            atexit.unregister(self._atexit)
        self._shutdown()

    def _shutdown(self) -> None:
        """Sampler-specific shutdown, called once."""

    def state_dict(self) -> dict[str, Any]:
        """Sampling state (RNG states, noise counters) for an exact resume."""
        raise NotImplementedError(f"{type(self).__name__} cannot snapshot its sampling state")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore a sampling state")

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.shutdown_worker()
            return
        # Leaving on an exception (a Ctrl-C, an error): a further Ctrl-C waits for the workers to go.
        with hold_while_stopping(stopping_notice):
            self.shutdown_worker()


def runs_workers_in_daemon_processes(factory: Any) -> bool:
    """Whether a registered sampler option runs its workers in daemon processes: its factory (a
    :class:`Sampler` subclass, or a function whose ``component_class`` is one) declares
    :attr:`Sampler.workers_in_daemon_processes`. A factory that declares nothing does not."""
    sampler_class = getattr(factory, "component_class", factory)
    return bool(getattr(sampler_class, "workers_in_daemon_processes", False))


__all__ = ["Sampler", "check_finite", "split_steps", "collect_share", "runs_workers_in_daemon_processes"]
