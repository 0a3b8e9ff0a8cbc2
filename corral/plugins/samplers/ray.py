"""``sampler=ray``: one Ray actor per worker, on this machine or on a Ray cluster.

``sampler.address`` empty starts a local Ray runtime sized for the machine (and stops it at
shutdown, within ``RaySampler.shutdown_timeout_s`` seconds, else kills its processes); ``auto`` or
``ray://host:port`` joins an existing cluster, which this sampler never shuts down. Broadcast updates are ``ray.put`` once and shared by every actor; per-worker lists
are put item by item. Every wait is bounded: a dead actor, an actor that raised (its traceback
included) or one that shows no progress for ``timeout`` seconds becomes a ``WorkerError``, or,
with ``on_worker_failure=restart``, the actor is rebuilt with its seed stream advanced and its
share is sampled again, at most ``max_restarts`` times per worker over the sampler's life. The
words and semantics are the multiprocessing sampler's: progress is the agent being asked for
actions (an environment step), which the driver reads about once a second from each busy actor
through a method in a concurrency group of its own (``progress``), so a slow worker that keeps
stepping is never timed out and a hung one is terminated. ``state_dict`` / ``load_state_dict``
calls are bounded the same way.

Updates travel with the work: each ``sample`` / ``exact`` call carries that round's agent and
environment update and applies it first, so an update that fails (wrong parameter shapes, an invalid
task, a class the actor cannot import) raises the same :class:`~corral.framework.errors.WorkerError`
as on every other sampler, and nothing is sampled with the old agent. A restarted actor is given
only what it needs to be where the others are: the latest full environment and the latest callable
applied to it, the latest Policy and the latest parameters (as the multiprocessing sampler does).

``sampler.runtime_env`` (``working_dir``, ``py_modules``, ``pip``, ``env_vars``) is Ray's runtime
environment: a script's own modules reach every node without being installed there.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.env import is_new_env, silence_gymnasium_deprecations
from corral.framework.errors import ConfigError, EnvironmentValueError, WorkerError
from corral.framework.logger import current_run_log, log_corral_records_as_lines
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler, collect_share, split_steps
from corral.framework.warning_lines import warnings_as_lines_here
from corral.framework.worker import (
    UpdateFailure,
    WorkerFactory,
    apply_updates,
    exception_summary,
    import_fix,
    update_error,
    worker_raised,
)
from corral.parallel.process_tree import kill_processes, process_tree
from corral.parallel.ray_runtime import (
    check_runtime_env,
    join_cluster,
    let_shutdown_finish,
    missing_module_in,
    shutdown_within,
    start_local_runtime,
)
from corral.parallel.worker_process import (
    MAX_RESTARTS_HELP,
    ON_WORKER_FAILURE_HELP,
    TIMEOUT_HELP,
    check_room_for_workers,
    count_agent_steps,
    describe_exit,
)

log = logging.getLogger(__name__)


@dataclass
class RaySamplerConfig:
    """Settings of the Ray sampler."""

    n_workers: int = field(default=2, metadata=check(ge=1, help="Ray actors, one worker each"))
    address: str = field(default="", metadata={"help": "'' = start a local Ray runtime; 'auto' or ray://host:port = join a cluster"})
    num_cpus: float = field(default=1.0, metadata=check(ge=0, help="CPUs reserved per actor"))
    num_gpus: float = field(default=0.0, metadata=check(ge=0, help="GPUs reserved per actor"))
    timeout: float = field(
        default=120.0,
        metadata=check(gt=0, help=TIMEOUT_HELP),
    )
    start_timeout: float = field(default=120.0, metadata=check(gt=0, help="seconds to wait for the actors to be placed and built"))
    on_worker_failure: str = field(
        default="raise",
        metadata=check(choices=("raise", "restart"), help=ON_WORKER_FAILURE_HELP),
    )
    max_restarts: int = field(
        default=3, metadata=check(ge=0, applies_if=("on_worker_failure", "==", "restart"),
                                  help=MAX_RESTARTS_HELP)
    )
    runtime_env: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Ray runtime environment of the actors: working_dir, py_modules, pip, env_vars "
                          "(e.g. sampler.runtime_env.working_dir=. ships this directory's modules to every node)"},
    )


class _RayWorker:
    """The actor: builds worker ``i`` from the factory where it runs and serves its rollouts."""

    def __init__(self, factory: WorkerFactory, worker_number: int, restart: int, run_log: str | None = None) -> None:
        import torch

        torch.set_num_threads(1)
        log_corral_records_as_lines(run_log, f"worker {worker_number}")  # the run's corral.log, where this node has it
        warnings_as_lines_here()  # another library's warning: one line, as in the driver
        silence_gymnasium_deprecations()  # as in the driver: no `CartPole-v0 is out of date` per actor
        os.environ["CORRAL_WORKER_NUMBER"] = str(worker_number)
        os.environ["CORRAL_WORKER_RESTART"] = str(restart)
        self.steps = 0  # the agent's get_actions calls: the progress the driver watches
        self.worker = factory(worker_number, restart)

    def progress(self) -> int:
        """Steps taken so far (called in the ``progress`` concurrency group, while a rollout runs)."""
        return self.steps

    def _count_steps(self) -> None:
        """Count the worker's agent's ``get_actions`` calls in :attr:`steps` (:func:`count_agent_steps`)."""
        count_agent_steps(self.worker, self)

    def where(self) -> tuple[int, str]:
        """Process id and Ray node id of this actor."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def update(self, agent_update: Any, env_update: Any) -> None:
        """Apply an environment update, then an agent update (:class:`UpdateFailure` if one fails)."""
        apply_updates(self.worker, env_update, agent_update)

    def sample(self, version: int, share: int, agent_update: Any = None, env_update: Any = None
               ) -> tuple[int, EpisodeBatch]:
        """Apply this round's updates, then whole episodes totalling at least ``share`` steps,
        tagged with the agent version."""
        apply_updates(self.worker, env_update, agent_update)
        self._count_steps()
        return version, collect_share(self.worker, share)

    def exact(self, version: int, n_episodes: int, agent_update: Any = None, env_update: Any = None
              ) -> tuple[int, EpisodeBatch]:
        """Apply this round's updates, then exactly ``n_episodes`` episodes, tagged with the agent version."""
        apply_updates(self.worker, env_update, agent_update)
        self._count_steps()
        return version, self.worker.rollout(n_episodes=n_episodes)

    def state_dict(self) -> dict[str, Any]:
        """The worker's sampling state."""
        return self.worker.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the worker's sampling state."""
        self.worker.load_state_dict(state)

    def shutdown(self) -> None:
        """Close the environments."""
        self.worker.shutdown()


class RaySampler(Sampler):
    """Samples with one Ray actor per worker; same seed, same episodes as the local sampler."""

    #: Seconds ``ray.shutdown()`` of the local runtime this sampler started may take before its
    #: processes are killed instead (:func:`stop_local_runtime`).
    shutdown_timeout_s: float = 30.0
    #: A Ray actor is a process of Ray's own, not a daemon process: its worker may start processes
    #: (``worker.backend=async`` runs under this sampler).
    workers_in_daemon_processes = False

    def __init__(
        self,
        agents: Any,
        envs: Any,
        *,
        address: str = "",
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        timeout: float = 120.0,
        start_timeout: float = 120.0,
        on_worker_failure: str = "raise",
        max_restarts: int = 3,
        runtime_env: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.runtime_env = check_runtime_env(runtime_env)
        if on_worker_failure not in ("raise", "restart"):
            raise ConfigError(f"sampler.on_worker_failure must be 'raise' or 'restart', got {on_worker_failure!r}")
        try:
            import ray
        except ImportError:
            raise ConfigError("sampler=ray needs Ray: pip install 'corral[ray]' (or pip install ray)") from None
        super().__init__(agents, envs, **kwargs)

        self._ray = ray
        self.address = address
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.timeout, self.start_timeout = timeout, start_timeout
        self.on_worker_failure, self.max_restarts = on_worker_failure, max_restarts
        self.n_restarts = 0
        self._started_ray = False
        self._actors: list[Any] = []
        self._restarts = [0] * self.n_workers
        self._version = 0
        self._actor_runtime_env = self._connect()
        options: dict[str, Any] = dict(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)
        if self._actor_runtime_env:
            options["runtime_env"] = self._actor_runtime_env
        # A concurrency group of its own for ``progress``: it answers while ``sample`` runs.
        remote = ray.remote(concurrency_groups={"progress": 1})  # type: ignore[call-overload]  # not in Ray's stubs
        self._actor_cls = remote(_RayWorker).options(**options)
        factory = self.worker_factory
        # What a restarted actor is given to be where the others are (object refs, per worker): the
        # latest full environment and the latest callable applied to it; the latest Policy and the
        # latest parameters. Bounded, however many updates a run sends.
        self._env_state: list[list[Any]] = [[] for _ in range(self.n_workers)]
        self._agent_state: list[list[Any]] = [[] for _ in range(self.n_workers)]
        self.locations: list[tuple[int, str]] = []
        try:
            agent_refs, env_refs = self._put_spread(agents), self._put_spread(envs)
            self._remember(envs, env_refs, self._env_state, replaces=is_new_env)
            self._remember(agents, agent_refs, self._agent_state, replaces=lambda u: isinstance(u, Policy))
            self._actors = [self._actor_cls.remote(factory, i, 0, current_run_log()) for i in range(self.n_workers)]
            self.locations = self._wait_ready(list(range(self.n_workers)))
            self._await({a.update.remote(ag, en): i
                         for i, (a, ag, en) in enumerate(zip(self._actors, agent_refs, env_refs))},
                        self.start_timeout, "starting")
        except BaseException:
            self.shutdown_worker()
            raise
        nodes = {node for _, node in self.locations}
        log.info("ray sampler: %d actors on %d node(s)", self.n_workers, len(nodes))

    # ------------------------------------------------------------------ runtime
    def _connect(self) -> dict[str, Any]:
        """Start or join the Ray runtime; return the runtime_env the actors still need (the
        sampler's own when Ray was already running, e.g. under the Ray launcher)."""
        ray = self._ray
        if ray.is_initialized():
            return self.runtime_env
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        extra: dict[str, Any] = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        if self.address:
            join_cluster(ray, self.address, "sampler.address", log_to_driver=True, configure_logging=False, **extra)
        else:
            need = int(self.n_workers * self.num_cpus + 0.999)
            check_room_for_workers(self.n_workers)  # every actor is a process on this machine
            # address="local": always a fresh runtime, never an existing `ray start` cluster or RAY_ADDRESS.
            start_local_runtime(ray, "ray sampler", num_cpus=max(os.cpu_count() or 1, need), include_dashboard=False,
                                log_to_driver=True, configure_logging=False, **extra)
            self._started_ray = True
        return {}

    def _remember(self, update: Any, refs: list[Any], state: list[list[Any]], replaces: Any) -> None:
        """Keep what a restarted actor needs of an update (see ``_env_state``)."""
        if update is None:
            return
        items = update if isinstance(update, list) else [update] * self.n_workers
        for i, (ref, item) in enumerate(zip(refs, items)):
            if item is None:
                continue
            if replaces(item) or not state[i]:
                state[i] = [ref]
            else:
                state[i] = [state[i][0], ref]

    def _put_spread(self, obj: Any) -> list[Any]:
        """``ray.put`` a broadcast object once (or each item of a per-worker list); None stays None."""
        ray = self._ray
        if obj is None:
            return [None] * self.n_workers
        if isinstance(obj, list):
            if len(obj) != self.n_workers:
                raise ConfigError(
                    f"a list of {len(obj)} updates was given for {self.n_workers} workers; a list must "
                    "have exactly one item per worker (or pass a single object to broadcast it)"
                )
            return [None if x is None else ray.put(x) for x in obj]
        ref = ray.put(obj)
        return [ref] * self.n_workers

    def _wait_ready(self, numbers: list[int]) -> list[tuple[int, str]]:
        ray = self._ray
        refs = [self._actors[i].where.remote() for i in numbers]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=self.start_timeout)
        if pending:
            stuck = [numbers[refs.index(r)] for r in pending]
            raise WorkerError(
                f"ray sampler: worker(s) {stuck} were not placed within {self.start_timeout:.0f} s; the cluster "
                f"may lack resources for num_cpus={self.num_cpus}, num_gpus={self.num_gpus} per actor "
                "(lower sampler.num_cpus or sampler.n_workers, or add nodes)",
                worker_number=stuck[0],
            )
        out = []
        for i, ref in zip(numbers, refs):
            try:
                out.append(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - the factory raised inside the actor
                raise self._worker_error(i, exc, "failed to start", "starting") from None
        return out

    def _await(self, refs: Mapping[Any, int], timeout: float, activity: str) -> dict[int, Any]:
        """Wait (bounded) for actor calls ``refs`` (ref -> worker) and return each worker's result; the
        first failure (an actor that raised, died or did not answer in time) is raised as a WorkerError."""
        ray = self._ray
        if not refs:
            return {}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        first: WorkerError | None = None
        results: dict[int, Any] = {}
        for ref in sorted(ready, key=lambda r: refs[r]):  # every one collected: no "Unhandled error" pages
            try:
                results[refs[ref]] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - mapped to WorkerError
                first = first or self._worker_error(refs[ref], exc, f"failed while {activity}", activity)
        if first is not None:
            self._cancel({r: refs[r] for r in pending})
            raise first
        if pending:
            stuck = sorted(refs[r] for r in pending)
            raise WorkerError(f"ray sampler: worker(s) {stuck} did not answer within {timeout:.0f} s "
                              f"while {activity}", worker_number=stuck[0])
        return results

    # ------------------------------------------------------------------ sampling
    def obtain_samples(self, itr: int, num_samples: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Whole episodes, at least ``num_samples`` steps, split evenly over actors in order."""
        shares = split_steps(num_samples, self.n_workers)
        out = self._gather(agent_update, env_update, "sample", shares)
        self.total_env_steps += len(out)
        return out

    def obtain_exact_episodes(self, n_eps_per_worker: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Exactly ``n_eps_per_worker`` episodes per actor, in worker order."""
        out = self._gather(agent_update, env_update, "exact", [n_eps_per_worker] * self.n_workers)
        self.total_env_steps += len(out)
        return out

    def _gather(self, agent_update: Any, env_update: Any, method: str, amounts: list[int]) -> EpisodeBatch:
        if self._closed:
            raise RuntimeError("this sampler was shut down; build a new one")
        self._version += 1
        version = self._version
        activity = _ACTIVITY[method]
        agent_refs = self._put_spread(agent_update)
        env_refs = self._put_spread(env_update)
        self._remember(env_update, env_refs, self._env_state, replaces=is_new_env)
        self._remember(agent_update, agent_refs, self._agent_state, replaces=lambda u: isinstance(u, Policy))
        # The updates travel with the work: an actor applies them before it samples, and a failed
        # update fails this very call (never a batch sampled with the previous agent).
        pending = {getattr(a, method).remote(version, n, ag, en): i
                   for i, (a, n, ag, en) in enumerate(zip(self._actors, amounts, agent_refs, env_refs))}
        results = self._watch(pending, activity, lambda i: getattr(self._actors[i], method).remote(version, amounts[i]))
        batches = []
        for i in range(self.n_workers):
            got_version, batch = results[i]
            if got_version != version:  # cannot happen with fresh refs; never mix versions
                raise WorkerError(f"ray sampler: worker {i} returned agent version {got_version}, "
                                  f"expected {version}", worker_number=i)
            batches.append(batch)
        return EpisodeBatch.concatenate(*batches)

    def _watch(self, pending: dict[Any, int], activity: str, resubmit: Callable[[int], Any]) -> dict[int, Any]:
        """Wait for the actor calls ``pending`` (ref -> worker) and return each worker's result. Every
        wait is bounded per worker by its progress: each busy actor is asked for its step count about
        once a second (as a worker process reports it); a worker whose count has not moved (and that has
        not answered) for ``timeout`` seconds is stuck, and is terminated. The first answer of each
        actor counts as progress, as a worker process's first report does. A failed worker raises its
        WorkerError, or with ``on_worker_failure=restart`` is restarted and given ``resubmit(i)``."""
        ray = self._ray
        pending = dict(pending)
        results: dict[int, Any] = {}
        now = time.monotonic()
        deadline = {i: now + self.timeout for i in pending.values()}
        seen: dict[int, int | None] = {i: None for i in deadline}
        next_probe = {i: now for i in deadline}
        probes: dict[Any, int] = {}
        while pending:
            now = time.monotonic()
            busy = sorted(set(pending.values()))
            asked = set(probes.values())
            for i in busy:
                if now >= next_probe[i] and i not in asked:
                    probes[self._actors[i].progress.options(concurrency_group="progress").remote()] = i
                    next_probe[i] = now + _PROBE_EVERY_S
            asked = set(probes.values())  # a worker asked already is waited on until its deadline
            wake = min(deadline[i] if i in asked else min(deadline[i], next_probe[i]) for i in busy)
            watched = [*pending, *probes]
            ready, _ = ray.wait(watched, num_returns=1, timeout=min(max(wake - now, 0.0), _PROBE_EVERY_S))
            if ready:  # every call finished by now, not only the first
                ready, _ = ray.wait(watched, num_returns=len(watched), timeout=0)
            failures: list[tuple[int, WorkerError]] = []
            for ref in ready:
                if ref in probes:
                    i = probes.pop(ref)
                    try:
                        steps = ray.get(ref)
                    except Exception:  # noqa: BLE001 - a dead actor: its own call says so
                        continue
                    if steps != seen[i]:
                        seen[i] = steps
                        deadline[i] = time.monotonic() + self.timeout
                    continue
                i = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - mapped to WorkerError below
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, (ConfigError, EnvironmentValueError)):
                        # A setting the worker cannot run with, or NaN sampled (collect_share's check, naming
                        # the worker): as under local, one line whose message says all.
                        self._cancel(pending, settle_s=min(self.timeout, 5.0))
                        self._settle(probes)
                        kind = ConfigError if isinstance(cause, ConfigError) else EnvironmentValueError
                        raise kind(str(cause)) from None
                    error = self._worker_error(i, exc, "failed", activity)
                    if self._is_update_failure(exc):  # deterministic: a restart would replay it
                        self._cancel(pending, settle_s=min(self.timeout, 5.0))
                        self._settle(probes)
                        raise error from None
                    failures.append((i, error))
            now = time.monotonic()
            failed = {i for i, _ in failures}
            for ref, i in list(pending.items()):
                if i not in failed and now > deadline[i]:
                    failures.append((i, self._stuck(i, activity)))
                    failed.add(i)
                    del pending[ref]
                    self._settle([ref], 2.0)  # the killed actor's call: collected, not an "Unhandled error" page
            for i, error in sorted(failures, key=lambda f: f[0]):
                if self.on_worker_failure != "restart" or self._restarts[i] >= self.max_restarts:
                    if self.on_worker_failure == "restart":
                        error = WorkerError(f"{error.message}; it was already restarted {self._restarts[i]} times "
                                            f"(sampler.max_restarts={self.max_restarts})",
                                            worker_number=i, remote_traceback=error.remote_traceback)
                    self._cancel(pending)
                    self._settle(probes)
                    raise error
                self._settle([ref for ref, j in probes.items() if j == i], 0.0)
                probes = {ref: j for ref, j in probes.items() if j != i}
                self._restart(i, error)
                pending[resubmit(i)] = i
                now = time.monotonic()
                deadline[i], next_probe[i], seen[i] = now + self.timeout, now, None
        self._settle(probes)
        return results

    def _stuck(self, i: int, activity: str) -> WorkerError:
        """Terminate actor ``i``, which showed no progress for ``timeout`` seconds, and say so."""
        pid = self.locations[i][0]
        try:
            self._ray.kill(self._actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 - it may already be gone
            pass
        return WorkerError(
            f"ray sampler: worker {i} (pid {pid}) made no progress for {self.timeout:g} s while {activity} and was "
            "terminated; raise sampler.timeout if its rollouts are this slow",
            worker_number=i,
        )

    def _settle(self, refs: Any, timeout: float = 1.0) -> None:
        """Collect the calls ``refs`` that finish within ``timeout`` seconds, whatever they returned or
        raised (a result never read would be printed by Ray as an "Unhandled error" page)."""
        ray = self._ray
        refs = list(refs)
        if not refs:
            return
        try:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        except Exception:  # noqa: BLE001 - the runtime may be going away
            return
        for ref in done:
            try:
                ray.get(ref, timeout=0)
            except Exception:  # noqa: BLE001 - only collected
                pass

    def _cancel(self, pending: Mapping[Any, int], settle_s: float = 0.0) -> None:
        """Cancel calls that are no longer needed; collect those finished (within ``settle_s``
        seconds), so that their errors (the other workers failing the same update) are not printed
        again as Ray's "Unhandled error" pages."""
        ray = self._ray
        refs = list(pending)
        done: list[Any] = []
        if refs:
            try:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=settle_s)
            except Exception:  # noqa: BLE001 - the runtime may be going away
                done = []
        for ref in refs:
            try:
                if ref in done:
                    ray.get(ref, timeout=0)
                else:
                    ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort; the actor is killed at shutdown anyway
                pass

    def _restart(self, i: int, error: WorkerError) -> None:
        """Replace actor ``i`` with a fresh one whose seed stream has moved on."""
        ray = self._ray
        self.n_restarts += 1
        self._restarts[i] += 1
        # The words of the multiprocessing sampler's warning.
        log.warning("%s; restarting it (restart %d of at most %d) and resampling its share", error.message,
                    self._restarts[i], self.max_restarts)
        try:
            ray.kill(self._actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 - it may already be gone
            pass
        self._actors[i] = self._actor_cls.remote(self.worker_factory, i, self._restarts[i], current_run_log())
        self.locations[i] = self._wait_ready([i])[0]
        actor = self._actors[i]
        refs = [actor.update.remote(None, e) for e in self._env_state[i]]
        refs += [actor.update.remote(a, None) for a in self._agent_state[i]]
        self._await({ref: i for ref in refs}, self.start_timeout, f"restarting worker {i}")

    def _is_update_failure(self, exc: BaseException) -> bool:
        """Whether ``exc`` (from an actor call) is an update that could not be applied."""
        return isinstance(getattr(exc, "cause", None), UpdateFailure) or missing_module_in(exc) is not None

    def _worker_error(self, i: int, exc: BaseException, what: str, activity: str) -> WorkerError:
        ray = self._ray
        pid = self.locations[i][0] if i < len(getattr(self, "locations", [])) else None
        cause = getattr(exc, "cause", None)
        if isinstance(cause, UpdateFailure):
            # The traceback of what raised (as the multiprocessing sampler's), not of the UpdateFailure carrying it.
            return update_error("ray", i, cause, ray_traceback(cause_part(str(exc))))
        module = missing_module_in(exc)
        if module is not None:
            # Ray unpickles the arguments (agent, environment, factory) before corral sees them.
            return WorkerError(
                f"ray sampler: worker {i} (pid {pid}) {what}: it cannot import module {module!r} "
                f"(ModuleNotFoundError while unpickling what the sampler sent it). The class is defined in a "
                f"module that Ray's workers cannot import; {import_fix('ray')}",
                worker_number=i, remote_traceback=str(exc),
            )
        if isinstance(exc, ray.exceptions.RayTaskError):
            # The words of every sampler (worker_raised), under the sampler's name as Ray's other errors.
            error = worker_raised(i, exception_summary(exc.cause), activity, ray_traceback(str(exc)), pid)
            return WorkerError(f"ray sampler: {error.message}", worker_number=i, remote_traceback=error.remote_traceback)
        if isinstance(exc, ray.exceptions.RayActorError):
            return actor_died(i, pid, activity, str(exc))
        return WorkerError(f"ray sampler: worker {i} {what}: {type(exc).__name__}: {exc}", worker_number=i)

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Every actor's sampling state."""
        # Bounded as sampling is: per worker, by its progress (``timeout`` seconds without any), not the whole call.
        results = self._watch({a.state_dict.remote(): i for i, a in enumerate(self._actors)},
                              "saving its sampling state (state_dict)", lambda i: self._actors[i].state_dict.remote())
        return {"workers": [results[i] for i in range(len(self._actors))], "total_env_steps": self.total_env_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore every actor's sampling state."""
        if len(state["workers"]) != len(self._actors):
            raise ConfigError(f"the sampler state holds {len(state['workers'])} workers, this sampler has "
                              f"{len(self._actors)}")
        workers = [self._ray.put(ws) for ws in state["workers"]]
        self._watch({a.load_state_dict.remote(ws): i for i, (a, ws) in enumerate(zip(self._actors, workers))},
                    "restoring its sampling state (load_state_dict)",
                    lambda i: self._actors[i].load_state_dict.remote(workers[i]))
        self.total_env_steps = int(state.get("total_env_steps", 0))

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        refs = []
        for actor in self._actors:
            try:
                refs.append(actor.shutdown.remote())
            except Exception:  # noqa: BLE001 - a dead actor cannot be asked
                pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=5)
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []
        if self._started_ray:
            stop_local_runtime(ray, [pid for pid, _ in self.locations], self.shutdown_timeout_s)


def stop_local_runtime(ray: Any, actor_pids: list[int], timeout_s: float) -> bool:
    """``ray.shutdown()`` of a local runtime this process started, bounded: it runs in a thread of its
    own, and when it has not returned within ``timeout_s`` seconds (a Ray process that stopped
    answering), the runtime's processes (raylet, GCS, object store...), the actors ``actor_pids``
    and every process descending from them (the raylet's agents) are killed instead, so none is
    left behind, and a warning says so. True when Ray shut down itself."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    processes = [info.process for infos in dict(getattr(node, "all_processes", None) or {}).values()
                 for info in infos if getattr(info, "process", None) is not None]
    done, thread = shutdown_within(ray, timeout_s)
    if done:
        return True
    # The whole tree first: a killed raylet's agents would be handed to another parent, out of reach.
    kill_processes(process_tree([process.pid for process in processes] + list(actor_pids)), grace_s=0)
    for process in processes:
        try:
            process.kill()  # one not found in /proc
            process.wait(timeout=5)  # reaped
        except Exception:  # noqa: BLE001 - gone already, or will not be reaped: nothing more to do
            pass
    if not thread.is_alive():  # it raised
        return False
    log.warning("ray sampler: Ray's shutdown did not finish within %g s; its processes were killed instead",
                timeout_s)
    # A shutdown that waited for those processes now finishes (this process's side of Ray torn down).
    let_shutdown_finish(ray, thread, _AFTER_KILL_S)
    return False


#: Seconds a Ray shutdown whose processes were killed may take to return.
_AFTER_KILL_S = 15.0


#: Seconds between two questions to a busy actor about its progress (a worker process reports as often).
_PROBE_EVERY_S = 1.0
#: What an actor call of each kind is doing, in the words of the other samplers' errors.
_ACTIVITY = {"sample": "sampling (obtain_samples)", "exact": "sampling (obtain_exact_episodes)"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ray_traceback(text: str) -> str:
    """Ray's text of an actor's exception as a Python traceback: its colour codes removed, each
    ``ray::Actor.method() (pid=..., ip=..., actor_id=..., repr=...)`` header (one per exception of a
    chain) replaced by Python's first line, and the caret lines Ray leaves under a header dropped."""
    out: list[str] = []
    after_header = False
    for line in _ANSI.sub("", text).splitlines():
        if line.startswith("ray::"):
            out.append("Traceback (most recent call last):")
            after_header = True
            continue
        if after_header and line.strip() and not line.strip().strip("^~"):
            continue
        after_header = False
        out.append(line)
    return "\n".join(out)


_CAUSE_LINK = "\n\nThe above exception was the direct cause of the following exception:\n\n"


def cause_part(text: str) -> str:
    """The part of a chained traceback's text before its last link: the exception that the last one
    (an :class:`UpdateFailure`, raised ``from`` it) carries. The whole text when it has no link."""
    head, link, _ = text.rpartition(_CAUSE_LINK)
    return head if link else text


#: How Ray words an actor process's end, where it knows it.
_EXIT_CODE = re.compile(r"\bexit code (-?\d+)")


def actor_died(i: int, pid: int | None, activity: str, text: str) -> WorkerError:
    """The WorkerError of actor ``i`` found dead while ``activity`` (Ray's error text ``text``), in the
    multiprocessing sampler's words: ``worker 1 (pid 42) exited with code 3 while sampling
    (obtain_samples)`` where Ray gives the exit code, else ``... died while ...`` with what Ray knows."""
    who = f"worker {i}" + (f" (pid {pid})" if pid is not None else "")
    when = "between requests" if activity == "idle" else f"while {activity}"
    flat = " ".join(text.split())
    found = _EXIT_CODE.search(flat)
    note = ""
    if found:
        how = describe_exit(int(found.group(1)))
    elif "memory monitor" in flat or "OutOfMemoryError" in flat:
        how, note = "was killed by Ray's memory monitor", " (its node ran low on memory)"
    elif "ray.kill" in flat or "killed by GCS" in flat:
        how = "was killed by Ray"
    else:  # Ray saw the connection to the process end: a signal (SIGKILL, SIGSEGV), an exit, the OOM killer
        how, note = "died", (" (Ray gives no exit code or signal; the node's Ray logs, /tmp/ray/session_latest/logs "
                             "by default, say more)")
    return WorkerError(f"ray sampler: {who} {how} {when}{note}", worker_number=i)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=ray``."""
    register("sampler", "ray", RaySampler, config=RaySamplerConfig,
             help="one Ray actor per worker; local runtime or a cluster (address=auto)")
