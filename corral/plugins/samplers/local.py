"""``sampler=local``: every worker in the calling process, one after another (the default)."""

from __future__ import annotations

import copy
import traceback
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, TypeVar

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.errors import CorralError
from corral.framework.interrupts import raised_by_signal_handler
from corral.framework.sampler import Sampler, collect_share, split_steps
from corral.framework.worker import UpdateFailure, Worker, apply_updates, raised_in_worker, update_error

T = TypeVar("T")


@dataclass
class LocalSamplerConfig:
    """Settings of the local sampler."""

    n_workers: int = field(default=1, metadata=check(ge=1, help="workers, run one after another in this process"))


class LocalSampler(Sampler):
    """Runs its workers in the main process, in worker order. Simple, exact, debuggable.

    A worker that raises (an environment's own exception) fails as a worker process does under the
    other samplers: a :class:`~corral.framework.errors.WorkerError` naming the worker, the exception
    and what it was doing, with its traceback (the original is its ``__cause__``). A corral error
    raised in a worker is passed on as it is: its message already says what to change."""

    def __init__(self, agents: Any, envs: Any, **kwargs: Any) -> None:
        super().__init__(agents, envs, **kwargs)
        factory = self.worker_factory
        self._workers: list[Worker] = []
        try:
            for i in range(factory.n_workers):
                self._workers.append(_in_worker(i, "starting", partial(factory, i)))
            self._update(agents, envs)
        except BaseException:
            self.shutdown_worker()  # the workers built so far (an AsyncVectorEnv holds processes)
            raise

    def _update(self, agent_update: Any, env_update: Any) -> None:
        factory = self.worker_factory
        agent_updates = factory.prepare_worker_messages(agent_update, copy.deepcopy)
        if isinstance(agent_update, list):
            # Like a broadcast (and like a process boundary), each worker gets its own copy: a list
            # holding one policy twice must not make two workers share (and reseed) one object.
            agent_updates = [copy.deepcopy(u) for u in agent_updates]
        env_updates = factory.prepare_worker_messages(env_update, lambda x: x)
        for i, (worker, agent_u, env_u) in enumerate(zip(self._workers, agent_updates, env_updates)):
            try:
                apply_updates(worker, env_u, agent_u)
            except UpdateFailure as failure:
                cause = failure.__cause__ or failure
                tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
                raise update_error("local", i, failure, tb) from None

    def obtain_samples(self, itr: int, num_samples: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Whole episodes, at least ``num_samples`` steps, split evenly over workers in order."""
        self._check_open()
        self._update(agent_update, env_update)
        shares = split_steps(num_samples, self.n_workers)
        out = EpisodeBatch.concatenate(*[_in_worker(i, "sampling (obtain_samples)", partial(collect_share, w, n))
                                         for i, (w, n) in enumerate(zip(self._workers, shares))])
        self.total_env_steps += len(out)
        return out

    def obtain_exact_episodes(self, n_eps_per_worker: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Exactly ``n_eps_per_worker`` episodes per worker, in worker order."""
        self._check_open()
        self._update(agent_update, env_update)
        batches = [_in_worker(i, "sampling (obtain_exact_episodes)", partial(w.rollout, n_episodes=n_eps_per_worker))
                   for i, w in enumerate(self._workers)]
        out = EpisodeBatch.concatenate(*batches)
        self.total_env_steps += len(out)
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this sampler was shut down; build a new one")

    def _shutdown(self) -> None:
        for worker in self._workers:
            worker.shutdown()

    def state_dict(self) -> dict[str, Any]:
        """Every worker's RNG states and noise counters."""
        return {"workers": [_in_worker(i, "saving its sampling state (state_dict)", w.state_dict)
                            for i, w in enumerate(self._workers)], "total_env_steps": self.total_env_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        for i, (worker, ws) in enumerate(zip(self._workers, state["workers"])):
            _in_worker(i, "restoring its sampling state (load_state_dict)", partial(worker.load_state_dict, ws))
        self.total_env_steps = int(state.get("total_env_steps", 0))


def _in_worker(i: int, activity: str, call: Callable[[], T]) -> T:
    """``call()``, worker ``i``'s part of ``activity``; an exception that is not a corral error becomes
    the WorkerError a worker process's would (:func:`~corral.framework.worker.raised_in_worker`)."""
    try:
        return call()
    except CorralError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the environment's (or a worker's) own failure
        # sys.exit() in an environment ends a worker process under the other samplers, which say so; here it
        # would end the run with the code it was given (0: a failed run exiting as a success). A signal
        # handler's SystemExit (submitit's requeue on SIGUSR2) ends the process as it asks.
        if isinstance(exc, SystemExit) and raised_by_signal_handler(exc):
            raise
        raise raised_in_worker(i, exc, activity) from exc


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=local``."""
    register("sampler", "local", LocalSampler, config=LocalSamplerConfig,
             help="workers in the calling process, one after another")
