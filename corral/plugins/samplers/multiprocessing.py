"""``sampler=multiprocessing``: long-lived worker processes on this machine.

Each worker process builds its worker from the picklable :class:`~corral.framework.worker.WorkerFactory`
(``factory(i)``) and keeps it, environments and agent included, for the sampler's lifetime.

How data travels:

- **Updates** (agent parameters, environments, task setters) are pickled once per distinct object
  (once in all for a broadcast, once per item for a per-worker list), written once into a
  shared-memory segment, and each worker receives only the segment's name and offsets. The
  segment is unlinked as soon as every worker it was meant for has answered.
- **Episodes** come back as one pickle-protocol-5 stream per worker whose arrays travel as
  out-of-band buffers (raw bytes, never copied into a pickle); no per-step messages.
- Every request carries a sequence number and the agent version (``agent_version``); a reply to an
  older request (say, one abandoned by Ctrl-C) is discarded, so older agents' episodes never enter
  a batch.

Same seed, same episodes: worker ``i`` samples its share (:func:`~corral.framework.sampler.split_steps`)
with the local sampler's loop and the batches are concatenated in worker order, so the result
equals :class:`~corral.plugins.samplers.local.LocalSampler`'s array for array.

Failures: every wait is :func:`multiprocessing.connection.wait` on the pipes and the process
sentinels with a timeout. A watchdog thread in each worker reports progress once a second while
its agent is being asked for actions (the worker is stepping). A worker that dies, raises, or
shows no progress for ``timeout`` seconds (hung in an environment, say) becomes a :class:`~corral.framework.errors.WorkerError` (worker number, exit code or signal, the
worker's own traceback) after the sampler shuts down, or, with ``on_worker_failure="restart"``, is
rebuilt with ``factory(i, restart=k)``, given the current agent and environment, and its share is
sampled again (logged; counted in ``n_restarts``).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Mapping, Sequence

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.env import is_new_env
from corral.framework.errors import ConfigError, CorralError, EnvironmentValueError, WorkerError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler, split_steps
from corral.framework.worker import UpdateFailure, update_error, worker_raised
from corral.parallel.shared_memory import SharedBlobs, dump_blob
from corral.parallel.worker_process import (
    MAX_RESTARTS_HELP,
    ON_WORKER_FAILURE_HELP,
    TIMEOUT_HELP,
    WorkerProcess,
    check_room_for_workers,
    describe_exit,
    stop_processes,
)

logger = logging.getLogger(__name__)

START_METHODS = ("spawn", "forkserver", "fork")
#: Seconds a new worker process may take to start and answer its first request (spawn imports torch,
#: the first agent update builds the policy) when ``timeout`` is shorter.
START_TIMEOUT_S = 120.0
FAILURE_POLICIES = ("raise", "restart")


@dataclass
class MultiprocessingSamplerConfig:
    """Settings of the multiprocessing sampler."""

    n_workers: int = field(default=2, metadata=check(ge=1, help="worker processes (one worker each)"))
    start_method: str = field(
        default="spawn",
        metadata=check(choices=("spawn", "forkserver", "fork"), help="how worker processes start: spawn (default: a fresh interpreter, safe with torch's "
                          "thread pools and with threads in this process), forkserver (spawn-like), or fork "
                          "(fastest, but unsafe once torch or other threads are running)"),
    )
    timeout: float = field(
        default=120.0,
        metadata=check(gt=0, help=TIMEOUT_HELP),
    )
    on_worker_failure: str = field(
        default="raise",
        metadata=check(choices=("raise", "restart"), help=ON_WORKER_FAILURE_HELP),
    )
    max_restarts: int = field(
        default=3, metadata=check(ge=0, applies_if=("on_worker_failure", "==", "restart"),
                                  help=MAX_RESTARTS_HELP)
    )
    cpu_affinity: bool = field(
        default=False, metadata={"help": "pin worker i to core i % cpu_count (os.sched_setaffinity; Linux)"}
    )


class _Failure(Exception):
    """Internal: worker ``worker_number`` failed; ``error`` is what the user will see."""

    def __init__(self, error: CorralError) -> None:
        super().__init__(str(error))
        self.error = error


class MultiprocessingSampler(Sampler):
    """Runs each worker in its own long-lived process (see the module docstring).

    Built like the local sampler::

        MultiprocessingSampler(agents=policy, envs=env, max_episode_length=500, n_workers=2,
                               worker_class=VecWorker, worker_args=dict(n_envs=8))
        MultiprocessingSampler.from_worker_factory(factory, agents=policy, envs=env, timeout=60)

    In a script, build it under ``if __name__ == "__main__":``: worker processes start with ``spawn``,
    which imports the script again in each of them.

    Attributes:
        n_restarts: workers restarted so far (``on_worker_failure="restart"``).
        agent_version: agent updates sent so far; replies to older requests are discarded.
        n_stale: replies discarded because they answered an older request (an abandoned call).
    """

    #: The option's name in messages (``sampler=<option_name>``).
    option_name: str = "multiprocessing"
    #: Each worker runs in a daemon process (:class:`~corral.parallel.worker_process.WorkerProcess`), which
    #: cannot start processes of its own (``worker.backend=async`` is refused before anything starts);
    #: the action-server samplers, whose workers are this sampler's processes, inherit it.
    workers_in_daemon_processes = True

    def __init__(
        self,
        agents: Any,
        envs: Any,
        *,
        n_workers: int = 2,
        start_method: str = "spawn",
        timeout: float = 120.0,
        on_worker_failure: str = "raise",
        max_restarts: int = 3,
        cpu_affinity: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(agents, envs, n_workers=n_workers, **kwargs)
        if start_method not in START_METHODS or start_method not in multiprocessing.get_all_start_methods():
            available = [m for m in START_METHODS if m in multiprocessing.get_all_start_methods()]
            raise ConfigError(f"sampler.start_method must be one of {available}, got {start_method!r}")
        if on_worker_failure not in FAILURE_POLICIES:
            raise ConfigError(f"sampler.on_worker_failure must be 'raise' or 'restart', got {on_worker_failure!r}")
        if not timeout or timeout <= 0:
            raise ConfigError(f"sampler.timeout must be a positive number of seconds, got {timeout!r}")
        if max_restarts < 0:
            raise ConfigError(f"sampler.max_restarts must be >= 0, got {max_restarts}")
        check_room_for_workers(self.n_workers)  # before any process: the OOM killer ends a run without a line
        self.start_method = start_method
        self.timeout = float(timeout)
        self.on_worker_failure = on_worker_failure
        self.max_restarts = int(max_restarts)
        self.cpu_affinity = bool(cpu_affinity)
        self.n_restarts = 0
        self.agent_version = 0
        self.n_stale = 0
        n = self.n_workers
        self._ctx = multiprocessing.get_context(start_method)
        self._seq = itertools.count(1)
        self._handles: list[WorkerProcess | None] = [None] * n
        self._restarts = [0] * n
        # What a restarted worker must be given to be where the others are: the latest full
        # environment and the latest callable applied to it; the latest Policy and parameters.
        self._env_state: list[list[bytes]] = [[] for _ in range(n)]
        self._agent_state: list[list[bytes]] = [[] for _ in range(n)]
        # Shared-memory segments still being read: (segment, {(worker, seq) yet to answer}).
        self._segments: list[tuple[SharedBlobs, set[tuple[int, int]]]] = []
        self._finalizer = weakref.finalize(self, _emergency_cleanup, self._handles, self._segments)
        for what, update in (("agents", agents), ("envs", envs)):
            if isinstance(update, list) and len(update) != n:
                self.shutdown_worker()
                raise ConfigError(f"{what} is a list of {len(update)} items for {n} workers; a list must have "
                                  "exactly one item per worker (or pass a single object to broadcast it)")
        try:
            for i in range(n):
                self._launch(i)
            self._call({i: ("update", None) for i in range(n)}, agents, envs, "starting")
        except BaseException:
            self.shutdown_worker()
            raise

    # ------------------------------------------------------------------ sampling
    def obtain_samples(self, itr: int, num_samples: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Whole episodes, at least ``num_samples`` steps, split evenly over workers in order."""
        shares = split_steps(num_samples, self.n_workers)
        results = self._call({i: ("steps", s) for i, s in enumerate(shares)}, agent_update, env_update,
                             "sampling (obtain_samples)")
        out = EpisodeBatch.concatenate(*[b for i in range(self.n_workers) for b in results[i]])
        self.total_env_steps += len(out)
        return out

    def obtain_exact_episodes(self, n_eps_per_worker: int, agent_update: Any, env_update: Any = None) -> EpisodeBatch:
        """Exactly ``n_eps_per_worker`` episodes per worker, in worker order."""
        results = self._call({i: ("episodes", n_eps_per_worker) for i in range(self.n_workers)}, agent_update,
                             env_update, "sampling (obtain_exact_episodes)")
        out = EpisodeBatch.concatenate(*[b for i in range(self.n_workers) for b in results[i]])
        self.total_env_steps += len(out)
        return out

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Every worker's RNG states and noise counters (the local sampler's format)."""
        results = self._call({i: ("state", None) for i in range(self.n_workers)}, None, None,
                             "saving its sampling state (state_dict)")
        return {"workers": [results[i] for i in range(self.n_workers)], "total_env_steps": self.total_env_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output in every worker."""
        workers = list(state["workers"])
        if len(workers) != self.n_workers:
            raise ConfigError(f"the sampler state holds {len(workers)} workers, this sampler has {self.n_workers}")
        self._call({i: ("load_state", dump_blob(ws)) for i, ws in enumerate(workers)}, None, None,
                   "restoring its sampling state (load_state_dict)")
        self.total_env_steps = int(state.get("total_env_steps", 0))

    @property
    def worker_pids(self) -> list[int | None]:
        """Process id of each worker (None where none runs)."""
        return [h.pid if h is not None and h.is_alive() else None for h in self._handles]

    # ------------------------------------------------------------------ requests
    def _call(self, commands: dict[int, tuple[str, Any]], agent_update: Any, env_update: Any,
              activity: str) -> dict[int, Any]:
        """Apply the updates and run ``commands`` (worker -> (action, arg)) on every worker; wait for
        every answer, handling failures per ``on_worker_failure``."""
        if self._closed:
            raise RuntimeError("this sampler was shut down; build a new one")
        try:
            self._check_alive(activity)
            env_blobs = self._serialise(env_update, "env_update")
            agent_blobs = self._serialise(agent_update, "agent_update")
            if agent_update is not None:
                self.agent_version += 1
            self._remember(env_blobs, env_update, self._env_state, replaces=is_new_env)
            self._remember(agent_blobs, agent_update, self._agent_state, replaces=lambda u: isinstance(u, Policy))
            self._send({i: ([] if env_blobs is None else [env_blobs[i]],
                            [] if agent_blobs is None else [agent_blobs[i]], *commands[i]) for i in commands})
            return self._gather(commands, activity)
        except _Failure as failure:
            self.shutdown_worker()
            raise failure.error from None

    def _serialise(self, update: Any, what: str) -> list[bytes] | None:
        """One pickled blob per worker; a broadcast is pickled once and shared."""
        if update is None:
            return None
        if isinstance(update, list):
            if len(update) != self.n_workers:
                raise ConfigError(
                    f"a list of {len(update)} {what}s was given for {self.n_workers} workers; a list must have "
                    "exactly one item per worker (or pass a single object to broadcast it)"
                )
            return [dump_blob(u) for u in update]
        blob = dump_blob(update)
        return [blob] * self.n_workers

    def _remember(self, blobs: list[bytes] | None, update: Any, state: list[list[bytes]], replaces: Any) -> None:
        if blobs is None:
            return
        items = update if isinstance(update, list) else [update] * self.n_workers
        for i, (blob, item) in enumerate(zip(blobs, items)):
            if item is None:
                continue
            if replaces(item) or not state[i]:
                state[i] = [blob]
            else:
                state[i] = [state[i][0], blob]

    def _send(self, messages: dict[int, tuple[list[bytes], list[bytes], str, Any]]) -> None:
        """Write every blob once into one segment and send each worker its references."""
        blobs: list[bytes] = []
        for env_b, agent_b, _action, arg in messages.values():
            blobs.extend(env_b)
            blobs.extend(agent_b)
            if isinstance(arg, bytes):
                blobs.append(arg)
        segment = None
        if blobs:
            segment = SharedBlobs(blobs)
            consumers: set[tuple[int, int]] = set()
            self._segments.append((segment, consumers))
        refs = iter(segment.refs if segment is not None else [])
        for i, (env_b, agent_b, action, arg) in messages.items():
            env_refs = [next(refs) for _ in env_b]
            agent_refs = [next(refs) for _ in agent_b]
            if isinstance(arg, bytes):
                arg = next(refs)
            seq = next(self._seq)
            handle = self._handles[i]
            assert handle is not None
            handle.current_seq = seq
            if segment is not None:
                consumers.add((i, seq))
            try:
                handle.submit((seq, self.agent_version, env_refs, agent_refs, action, arg))
            except (OSError, ValueError):
                handle.broken = "its pipe is closed"

    def _gather(self, commands: dict[int, tuple[str, Any]], activity: str) -> dict[int, Any]:
        """Wait for every worker's answer; each wait is bounded and watches the process sentinels."""
        results: dict[int, Any] = {}
        for i in commands:
            self._reset_deadline(self._handle(i))
        while len(results) < len(commands):
            waiting = [i for i in commands if i not in results]
            watched: dict[Any, int] = {}
            for i in waiting:
                h = self._handle(i)
                if h.broken:
                    self._on_failure(i, commands, activity, self._error_unusable(i, activity))
                    h = self._handle(i)
                watched[h.conn] = i
                watched[h.sentinel] = i
            soonest = min(self._handle(i).deadline for i in waiting)
            ready = wait(list(watched), timeout=max(0.0, min(soonest - time.monotonic(), 5.0)))
            for i in sorted({watched[r] for r in ready}):
                if i in results:
                    continue
                error = self._drain(i, results, activity)
                if error is None and i not in results and not self._handle(i).is_alive():
                    error = self._error_died(i, activity)
                if error is not None:
                    self._on_failure(i, commands, activity, error)
            now = time.monotonic()
            for i in waiting:
                if i not in results and now > self._handle(i).deadline:
                    self._on_failure(i, commands, activity, self._error_stuck(i, activity))
        return results

    def _drain(self, i: int, results: dict[int, Any], activity: str) -> WorkerError | None:
        """Read every message worker ``i`` has sent; return the error it reported, if any."""
        h = self._handle(i)
        try:
            while i not in results and h.conn.poll(0):
                kind, seq, version, payload = h.recv(self.timeout)
                if kind == "ready":
                    h.on_ready()
                self._reset_deadline(h)
                if kind in ("ready", "progress"):
                    continue
                if kind == "error":
                    self._release(i, {seq})
                    if seq and seq != h.current_seq:
                        # The failure of a request abandoned earlier (say, by Ctrl-C): not this call's.
                        self.n_stale += 1
                        logger.debug("worker %d: dropped the error of abandoned request %d: %s", i, seq, payload[0])
                        continue
                    summary, tb, *rest = payload
                    if rest and rest[0]:
                        # Applying the update failed: a restart would replay it, so it is raised at once.
                        raise _Failure(update_error(self.option_name, i, UpdateFailure(*rest[0]), tb))
                    if len(rest) > 1 and rest[1]:
                        # A setting the worker cannot run with: its message says what to change, and a
                        # restart would fail alike. The same one line as the local sampler's.
                        raise _Failure(ConfigError(rest[1]))
                    if len(rest) > 2 and rest[2]:
                        # The environment returned NaN (collect_share's check, whose message names this
                        # worker): the error the trainer raises for it, and a restart would sample it again.
                        raise _Failure(EnvironmentValueError(rest[2]))
                    return worker_raised(i, summary, activity, tb, pid=h.pid)
                else:  # "done" / "batches"
                    h.served = True
                    self._release(i, {seq})
                    if seq == h.current_seq and version == self.agent_version:
                        results[i] = payload
                    else:  # the answer to an older request (an older agent version): dropped
                        self.n_stale += 1
        except (EOFError, OSError):
            return self._error_died(i, activity)
        except TimeoutError:
            return self._error_stuck(i, activity)
        return None

    # ------------------------------------------------------------------ failures
    def _check_alive(self, activity: str) -> None:
        """Before a request: every worker must be running (dead ones fail or restart now)."""
        dead = [i for i in range(self.n_workers) if not self._handle(i).is_alive() or self._handle(i).broken]
        if not dead:
            return
        if self.on_worker_failure == "raise":
            first = dead[0]
            error = self._error_unusable(first, "idle")
            if len(dead) == self.n_workers:
                error = WorkerError(f"all {self.n_workers} workers are dead; {error}", worker_number=first,
                                    exitcode=error.exitcode, remote_traceback=error.remote_traceback)
            raise _Failure(error)
        for i in dead:
            self._on_failure(i, {}, activity, self._error_unusable(i, "idle"))
            commands = {i: ("update", None)}
            self._gather(commands, f"restarting worker {i}")

    def _on_failure(self, i: int, commands: dict[int, tuple[str, Any]], activity: str, error: WorkerError) -> None:
        """Raise (via :class:`_Failure`) or restart worker ``i`` and resubmit its command."""
        if self.on_worker_failure == "raise":
            raise _Failure(error)
        if self._restarts[i] >= self.max_restarts:
            raise _Failure(WorkerError(
                f"{error.args[0]}; it was already restarted {self._restarts[i]} times "
                f"(sampler.max_restarts={self.max_restarts})",
                worker_number=i, exitcode=error.exitcode, remote_traceback=error.remote_traceback,
            ))
        self._restarts[i] += 1
        self.n_restarts += 1
        logger.warning("%s; restarting it (restart %d of at most %d) and resampling its share",
                       error.args[0], self._restarts[i], self.max_restarts)
        self._launch(i)
        action, arg = commands.get(i, ("update", None))
        self._send({i: (list(self._env_state[i]), list(self._agent_state[i]), action, arg)})
        self._reset_deadline(self._handle(i))

    def _reset_deadline(self, h: WorkerProcess) -> None:
        """Progress seen: the worker has ``timeout`` more seconds (more while it is starting)."""
        h.deadline = time.monotonic() + self._limit(h)

    def _limit(self, h: WorkerProcess) -> float:
        """Seconds without progress allowed: ``timeout``, or more until the first answer."""
        return self.timeout if h.served else max(self.timeout, START_TIMEOUT_S)

    def _launch(self, i: int) -> None:
        """Start (or restart) worker ``i``'s process; it builds ``factory(i, restart=k)`` itself."""
        old = self._handles[i]
        if old is not None:
            old.kill()
            self._release(i, old.outstanding)
        handle = WorkerProcess(self._ctx, self._process_factory(i), i, restart=self._restarts[i],
                               cpu_affinity=self.cpu_affinity)
        self._handles[i] = handle
        try:
            handle.start()
        except Exception as exc:
            raise ConfigError(
                f"cannot start worker {i} with start_method={self.start_method!r}: {type(exc).__name__}: {exc}. "
                "The WorkerFactory (worker class and worker_args) must be picklable and importable by name; "
                "define classes at module level"
            ) from exc

    def _process_factory(self, i: int) -> Any:
        """What worker ``i``'s process is started with and calls to build its worker (subclasses
        may wrap the WorkerFactory to hand the process more at its start)."""
        return self.worker_factory

    def _handle(self, i: int) -> WorkerProcess:
        h = self._handles[i]
        assert h is not None
        return h

    def _error_died(self, i: int, activity: str) -> WorkerError:
        h = self._handle(i)
        code = h.exitcode(wait=1.0)
        when = "between requests" if activity == "idle" else f"while {activity}"
        hint = ""
        if activity == "starting" and code == 1 and self.start_method != "fork":
            hint = (f"; its own error is printed above. With start_method={self.start_method!r} each worker "
                    "re-imports the main module: in a script, build the sampler under "
                    "`if __name__ == '__main__':`")
        return WorkerError(f"worker {i} (pid {h.pid}) {describe_exit(code)} {when}{hint}", worker_number=i,
                           exitcode=code)

    def _error_stuck(self, i: int, activity: str) -> WorkerError:
        h = self._handle(i)
        limit = self._limit(h)
        h.kill()
        return WorkerError(
            f"worker {i} (pid {h.pid}) made no progress for {limit:g} s while {activity} and was "
            f"terminated; raise sampler.timeout if its rollouts are this slow",
            worker_number=i, exitcode=h.exitcode(wait=0.0),
        )

    def _error_unusable(self, i: int, activity: str) -> WorkerError:
        """A dead worker, or a live one whose pipe can no longer be trusted."""
        h = self._handle(i)
        if not h.is_alive():
            return self._error_died(i, activity)
        when = "between requests" if activity == "idle" else f"while {activity}"
        return WorkerError(f"worker {i} (pid {h.pid}) cannot be used: {h.broken} {when}",
                           worker_number=i, exitcode=h.exitcode(wait=0.0))

    def _release(self, i: int, seqs: Any) -> None:
        """Worker ``i`` is done with the segments of requests ``seqs``; unlink unused segments."""
        done = {(i, s) for s in seqs}
        keep = []
        for segment, consumers in self._segments:
            consumers -= done
            if consumers:
                keep.append((segment, consumers))
            else:
                segment.unlink()
        self._segments[:] = keep
        h = self._handles[i]
        if h is not None:
            h.outstanding -= set(seqs)

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        """Stop every worker (bounded: stop, join, terminate, kill) and unlink every segment."""
        try:
            stop_processes([h for h in self._handles if h is not None], timeout=5.0, grace=2.0)
        finally:
            for segment, _ in self._segments:
                segment.unlink()
            self._segments.clear()
            self._finalizer.detach()


def _emergency_cleanup(handles: Sequence[WorkerProcess | None], segments: list) -> None:
    """Kill the workers and unlink the segments of a sampler collected without a shutdown."""
    stop_processes([h for h in handles if h is not None], timeout=0.0, grace=1.0)
    for segment, _ in segments:
        segment.unlink()
    segments.clear()


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=multiprocessing``."""
    register("sampler", "multiprocessing", MultiprocessingSampler, config=MultiprocessingSamplerConfig,
             help="long-lived worker processes; episodes through out-of-band buffers, updates through shared memory")
