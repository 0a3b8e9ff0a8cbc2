"""``sampler=ray``: one Ray actor per worker, on this machine or on a Ray cluster.

``sampler.address`` empty starts a local Ray runtime sized for the machine (and stops it at
shutdown); ``auto`` or ``ray://host:port`` joins an existing cluster, which this sampler never
shuts down. Broadcast updates are ``ray.put`` once and shared by every actor; per-worker lists
are put item by item. Every wait is bounded: a dead actor, an actor that raised (its traceback
included) or one that makes no progress within ``timeout`` seconds becomes a ``WorkerError``,
or, with ``on_worker_failure=restart``, the actor is rebuilt with its seed stream advanced and its
share is sampled again.

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
from dataclasses import dataclass, field
from typing import Any, Mapping

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.env import is_new_env
from corral.framework.errors import ConfigError, WorkerError
from corral.framework.logger import current_run_log, log_corral_records_as_lines
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler, collect_share, split_steps
from corral.framework.worker import (
    UpdateFailure,
    WorkerFactory,
    apply_updates,
    exception_summary,
    import_fix,
    update_error,
    worker_raised,
)
from corral.parallel.ray_runtime import check_runtime_env, join_cluster, missing_module_in, start_local_runtime
from corral.parallel.worker_process import check_room_for_workers

log = logging.getLogger(__name__)


@dataclass
class RaySamplerConfig:
    """Settings of the Ray sampler."""

    n_workers: int = field(default=2, metadata=check(ge=1, help="Ray actors, one worker each"))
    address: str = field(default="", metadata={"help": "'' = start a local Ray runtime; 'auto' or ray://host:port = join a cluster"})
    num_cpus: float = field(default=1.0, metadata=check(ge=0, help="CPUs reserved per actor"))
    num_gpus: float = field(default=0.0, metadata=check(ge=0, help="GPUs reserved per actor"))
    timeout: float = field(default=120.0, metadata=check(gt=0, help="seconds without any result before a worker counts as stuck"))
    start_timeout: float = field(default=120.0, metadata=check(gt=0, help="seconds to wait for the actors to be placed and built"))
    on_worker_failure: str = field(default="raise", metadata=check(choices=("raise", "restart"), help="raise | restart"))
    max_restarts: int = field(default=3, metadata=check(ge=0, applies_if=("on_worker_failure", "==", "restart"),
                                                         help="restarts allowed per obtain call before giving up"))
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
        os.environ["CORRAL_WORKER_NUMBER"] = str(worker_number)
        os.environ["CORRAL_WORKER_RESTART"] = str(restart)
        self.worker = factory(worker_number, restart)

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
        return version, collect_share(self.worker, share)

    def exact(self, version: int, n_episodes: int, agent_update: Any = None, env_update: Any = None
              ) -> tuple[int, EpisodeBatch]:
        """Apply this round's updates, then exactly ``n_episodes`` episodes, tagged with the agent version."""
        apply_updates(self.worker, env_update, agent_update)
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
        self._actor_cls = ray.remote(_RayWorker).options(**options)
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
        ray = self._ray
        if self._closed:
            raise RuntimeError("this sampler was shut down; build a new one")
        self._version += 1
        version = self._version
        agent_refs = self._put_spread(agent_update)
        env_refs = self._put_spread(env_update)
        self._remember(env_update, env_refs, self._env_state, replaces=is_new_env)
        self._remember(agent_update, agent_refs, self._agent_state, replaces=lambda u: isinstance(u, Policy))
        # The updates travel with the work: an actor applies them before it samples, and a failed
        # update fails this very call (never a batch sampled with the previous agent).
        pending = {getattr(a, method).remote(version, n, ag, en): i
                   for i, (a, n, ag, en) in enumerate(zip(self._actors, amounts, agent_refs, env_refs))}
        results: dict[int, EpisodeBatch] = {}
        restarts_this_call = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout)
            if not ready:
                stuck = sorted(pending.values())
                error = WorkerError(
                    f"ray sampler: worker(s) {stuck} returned nothing for {self.timeout:.0f} s (sampler.timeout); "
                    "an environment may be hanging",
                    worker_number=stuck[0],
                )
                failed = stuck
            else:
                ref = ready[0]
                i = pending.pop(ref)
                try:
                    got_version, batch = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - mapped to WorkerError below
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, ConfigError):  # a setting the worker cannot run with: as under local
                        self._cancel(pending, settle_s=min(self.timeout, 5.0))
                        raise ConfigError(str(cause)) from None
                    error, failed = self._worker_error(i, exc, "failed", _ACTIVITY[method]), [i]
                    if self._is_update_failure(exc):  # deterministic: a restart would replay it
                        self._cancel(pending, settle_s=min(self.timeout, 5.0))
                        raise error from None
                else:
                    if got_version != version:  # cannot happen with fresh refs; never mix versions
                        raise WorkerError(f"ray sampler: worker {i} returned agent version {got_version}, "
                                          f"expected {version}", worker_number=i)
                    results[i] = batch
                    continue
            if self.on_worker_failure != "restart" or restarts_this_call + len(failed) > self.max_restarts:
                self._cancel(pending)
                raise error
            for i in failed:
                restarts_this_call += 1
                for ref, j in list(pending.items()):
                    if j == i:
                        del pending[ref]
                self._restart(i, error)
                pending[getattr(self._actors[i], method).remote(version, amounts[i])] = i
        return EpisodeBatch.concatenate(*[results[i] for i in range(self.n_workers)])

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
        log.warning("ray sampler: restarting worker %d (restart %d): %s", i, self._restarts[i],
                    str(error).splitlines()[0])
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
            return update_error("ray", i, cause, str(exc))
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
            return WorkerError(
                f"ray sampler: worker {i} (pid {pid}) died: the actor process exited or was killed "
                f"({str(exc).splitlines()[0][:300]})",
                worker_number=i,
            )
        return WorkerError(f"ray sampler: worker {i} {what}: {type(exc).__name__}: {exc}", worker_number=i)

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Every actor's sampling state."""
        results = self._await({a.state_dict.remote(): i for i, a in enumerate(self._actors)}, self.timeout,
                              "saving its sampling state (state_dict)")
        return {"workers": [results[i] for i in range(len(self._actors))], "total_env_steps": self.total_env_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore every actor's sampling state."""
        if len(state["workers"]) != len(self._actors):
            raise ConfigError(f"the sampler state holds {len(state['workers'])} workers, this sampler has "
                              f"{len(self._actors)}")
        self._await({a.load_state_dict.remote(s): i for i, (a, s) in enumerate(zip(self._actors, state["workers"]))},
                    self.timeout, "restoring its sampling state (load_state_dict)")
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
            ray.shutdown()


#: What an actor call of each kind is doing, in the words of the other samplers' errors.
_ACTIVITY = {"sample": "sampling (obtain_samples)", "exact": "sampling (obtain_exact_episodes)"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ray_traceback(text: str) -> str:
    """Ray's text of an actor's exception as a Python traceback: its colour codes removed, its
    ``ray::Actor.method() (pid=..., ip=..., actor_id=..., repr=...)`` header replaced by Python's
    first line, and the caret lines Ray leaves under that header dropped."""
    lines = _ANSI.sub("", text).splitlines()
    if lines and lines[0].startswith("ray::"):
        lines = ["Traceback (most recent call last):", *lines[1:]]
        while len(lines) > 1 and lines[1].strip() and not lines[1].strip().strip("^~"):
            del lines[1]
    return "\n".join(lines)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=ray``."""
    register("sampler", "ray", RaySampler, config=RaySamplerConfig,
             help="one Ray actor per worker; local runtime or a cluster (address=auto)")
