"""A sampling worker in its own process: the child's command loop and the parent's handle.

The parent talks to each child over one duplex ``multiprocessing`` pipe. Only small control
tuples are pickled onto it; bulk data travels separately:

parent -> child: ``(seq, version, env_refs, agent_refs, action, arg)`` or ``"stop"``.
    ``env_refs`` / ``agent_refs`` locate pickled updates (:class:`~corral.parallel.shared_memory.BlobRef`
    in a shared-memory segment written once for every worker, or inline ``bytes``); the child
    applies them in order (``update_env`` then ``update_agent``, as the local sampler does), then
    performs ``action``: ``"steps"`` (at least ``arg`` steps of whole episodes, with the local
    sampler's loop), ``"episodes"`` (``rollout(n_episodes=arg)``), ``"update"`` (nothing more),
    ``"state"`` (reply with ``Worker.state_dict()``), ``"load_state"`` (``arg`` locates a state).

child -> parent: ``(kind, seq, version, payload)`` with kind ``"ready"`` (payload: pid),
    ``"progress"`` (the worker is still working; at most one a second), ``"done"`` (a small result),
    ``"error"`` (payload: ``(summary, formatted traceback)``, plus the arguments of an
    :class:`~corral.framework.worker.UpdateFailure` when applying an update failed, or ``None``, the
    message of a :class:`~corral.framework.errors.ConfigError` the worker raised and that of an
    :class:`~corral.framework.errors.EnvironmentValueError` (NaN sampled), each None when not that) or ``"batches"`` (payload: the sizes
    of the parts that follow: a pickle-protocol-5 stream of the list of EpisodeBatches, then each
    array's raw bytes as an out-of-band buffer, so arrays are never copied into a pickle).

The child ignores SIGINT (a Ctrl-C in a terminal reaches the whole process group; the parent
shuts its workers down in order), runs torch with one thread, optionally pins itself to a core,
and exits when told to stop, when its pipe closes, or (a watchdog thread) as soon as its parent
dies, even in the middle of a rollout.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Sequence

from corral.framework.env import silence_gymnasium_deprecations
from corral.framework.errors import ConfigError, EnvironmentValueError
from corral.framework.logger import current_run_log, log_corral_records_as_lines
from corral.framework.memory import check_room_for_processes
from corral.framework.warning_lines import warnings_as_lines_here
from corral.framework.worker import UpdateFailure
from corral.parallel.shared_memory import load_blob

#: Seconds between a child's checks on its parent, and between its progress reports.
_WATCH_EVERY_S = 1.0


# ---------------------------------------------------------------------- child side
class _Channel:
    """The child's end of the pipe, shared by the main thread and the watchdog thread.

    ``busy`` is ``(seq, version)`` while a request is being served, else None; ``steps`` counts
    the agent's ``get_actions`` calls (one per environment step or vector step).
    """

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.busy: tuple[int, int] | None = None
        self.steps = 0

    def count_steps(self, worker: Any) -> None:
        """Count the worker's agent's ``get_actions`` calls in :attr:`steps` (:func:`count_agent_steps`)."""
        count_agent_steps(worker, self)

    def send(self, msg: Any) -> None:
        with self.lock:
            self.conn.send(msg)

    def send_batches(self, seq: int, version: int, obj: Any) -> None:
        """``obj`` (EpisodeBatches) as a pickle-5 stream plus its arrays as out-of-band buffers."""
        buffers: list[pickle.PickleBuffer] = []
        stream = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        with self.lock:
            self.conn.send(("batches", seq, version, [len(stream)] + [r.nbytes for r in raws]))
            self.conn.send_bytes(stream)
            for raw in raws:
                self.conn.send_bytes(raw)


def worker_main(factory: Any, worker_number: int, restart: int, conn: Any, cpu_affinity: bool,
                run_log: str | None = None) -> None:
    """Entry point of a worker process: build worker ``worker_number`` and serve commands; its log
    records go to stderr and to ``run_log`` (the run's ``corral.log``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent_pid = os.getppid()  # the sampler's process (or, under forkserver, the fork server)
    if hasattr(signal, "pthread_sigmask"):  # the parent blocked SIGINT around our start
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    channel = _Channel(conn)
    _start_watchdog(parent_pid, channel)
    log_corral_records_as_lines(run_log, f"worker {worker_number}")
    warnings_as_lines_here()  # another library's warning: one line, as in the sampler's process
    silence_gymnasium_deprecations()  # as in the sampler's process: no `CartPole-v0 is out of date` per worker
    # Which worker this process is (read by corral.testing.faulty_envs, for instance).
    os.environ["CORRAL_WORKER_NUMBER"] = str(worker_number)
    os.environ["CORRAL_WORKER_RESTART"] = str(restart)
    try:
        _limit_threads()
        if cpu_affinity:
            _pin_to_core(worker_number)
        worker = factory(worker_number, restart=restart)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        try:
            channel.send(("error", 0, 0, (_summary(exc), traceback.format_exc())))
        except Exception:  # noqa: BLE001 - the parent is gone
            pass
        conn.close()
        sys.exit(1)
    try:
        channel.send(("ready", 0, 0, os.getpid()))
        while True:
            msg = _next_message(conn, parent_pid)
            if msg is None:
                return
            seq, version, env_refs, agent_refs, action, arg = msg
            channel.busy = (seq, version)
            try:
                _serve(worker, channel, seq, version, env_refs, agent_refs, action, arg)
            except (BrokenPipeError, ConnectionResetError):
                return
            except UpdateFailure as exc:  # the parent raises it (a restart would replay the same update)
                cause = exc.__cause__ or exc
                tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
                channel.send(("error", seq, version, (str(exc), tb, exc.args)))
            except Exception as exc:  # noqa: BLE001 - the parent decides (raise or restart)
                channel.send(("error", seq, version, (_summary(exc), traceback.format_exc(), None,
                                                      str(exc) if isinstance(exc, ConfigError) else None,
                                                      str(exc) if isinstance(exc, EnvironmentValueError) else None)))
            finally:
                channel.busy = None
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the parent is gone
    finally:
        try:
            worker.shutdown()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
        conn.close()


def _serve(worker: Any, channel: _Channel, seq: int, version: int, env_refs: Sequence[Any],
           agent_refs: Sequence[Any], action: str, arg: Any) -> None:
    for stage, refs, apply in (("environment update", env_refs, worker.update_env),
                               ("agent update", agent_refs, worker.update_agent)):
        for ref in refs:
            try:
                apply(load_blob(ref))  # unpickling included: a class the worker cannot import fails here
            except Exception as exc:  # noqa: BLE001 - reported with the stage that failed
                raise UpdateFailure.of(stage, exc) from exc
    channel.count_steps(worker)
    if action == "steps":
        channel.send_batches(seq, version, sample_steps(worker, int(arg)))
    elif action == "episodes":
        channel.send_batches(seq, version, [worker.rollout(n_episodes=int(arg))])
    elif action == "update":
        channel.send(("done", seq, version, None))
    elif action == "state":
        channel.send(("done", seq, version, worker.state_dict()))
    elif action == "load_state":
        worker.load_state_dict(load_blob(arg))
        channel.send(("done", seq, version, None))
    else:
        raise ValueError(f"unknown worker command {action!r}")


def sample_steps(worker: Any, share: int) -> list[Any]:
    """Every sampler's loop for one worker (:func:`~corral.framework.sampler.collect_share`):
    whole episodes until at least ``share`` steps, as a one-item list."""
    from corral.framework.sampler import collect_share

    return [collect_share(worker, share)]


def _start_watchdog(parent_pid: int, channel: _Channel) -> None:
    """A daemon thread that, every second,

    - exits the process at once if the sampler's process has died (even mid-rollout), and
    - while a request is served, reports ``progress`` if the agent has been asked for actions since
      the last look (the worker stepped its environments). A worker hung in an environment or a
      policy call shows none and times out in the parent; a slow but stepping one never does.
    """
    parent = multiprocessing.parent_process()
    sentinel = parent.sentinel if parent is not None else None

    def watch() -> None:
        last: Any = None
        while True:
            if sentinel is not None:
                if wait([sentinel], timeout=_WATCH_EVERY_S):
                    os._exit(1)
            else:  # pragma: no cover - no parent sentinel
                time.sleep(_WATCH_EVERY_S)
            if os.getppid() != parent_pid:
                os._exit(1)
            busy = channel.busy
            now = (busy, channel.steps) if busy is not None else None
            if busy is not None and now != last and channel.lock.acquire(blocking=False):
                try:
                    channel.conn.send(("progress", busy[0], busy[1], None))
                except Exception:  # noqa: BLE001 - the parent is gone; the checks above will see it
                    pass
                finally:
                    channel.lock.release()
            last = now

    threading.Thread(target=watch, name="corral-worker-watchdog", daemon=True).start()


def _next_message(conn: Any, parent_pid: int) -> Any:
    """The next command, or None when told to stop or when the parent is gone."""
    while True:
        if conn.poll(_WATCH_EVERY_S):
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return None
            return None if msg == "stop" else msg
        if os.getppid() != parent_pid:  # re-parented: our parent died
            return None


def _limit_threads() -> None:
    """One compute thread per worker. torch is not imported for this (seconds per process): the
    thread variables make a later import start with one thread; an already imported torch is told."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _pin_to_core(worker_number: int) -> None:
    if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - macOS, Windows
        return
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[worker_number % len(cores)]})


def _summary(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---------------------------------------------------------------------- parent side
def describe_exit(exitcode: int | None) -> str:
    """``exitcode`` in words: 'was killed by signal 9 (SIGKILL)', 'exited with code 1'."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


class WorkerProcess:
    """The parent's handle on one worker process.

    ``submit`` sends a command, or queues it until the child reports ``ready`` (so the parent
    never blocks on a child that is still importing). ``recv`` reads one message, multi-part batch
    messages included, each part bounded by a timeout.
    """

    def __init__(self, ctx: Any, factory: Any, worker_number: int, *, restart: int = 0,
                 cpu_affinity: bool = False) -> None:
        self.worker_number = worker_number
        self.restart = restart
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self._child_conn: Any = child_conn
        self.process = ctx.Process(
            target=worker_main,
            args=(factory, worker_number, restart, child_conn, cpu_affinity, current_run_log()),
            name=f"corral-worker-{worker_number}" + (f"-restart-{restart}" if restart else ""),
            daemon=True,
        )
        self.started = False
        self.closed = False
        self._pid: int | None = None
        self._exitcode: int | None = None
        self.ready = False
        self.served = False  # answered a request: past the start-up work (first agent, imports)
        self.queued: list[Any] = []
        self.outstanding: set[int] = set()
        self.current_seq: int | None = None
        self.deadline = float("inf")
        self.broken: str | None = None

    def start(self) -> None:
        """Start the process with SIGINT blocked, so the child inherits a blocked SIGINT until it
        has installed SIG_IGN (a Ctrl-C during its start-up cannot kill it half-way)."""
        masked = hasattr(signal, "pthread_sigmask")
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if masked else None
        try:
            self.process.start()
            self.started = True
            self._pid = self.process.pid
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            self._child_conn.close()

    @property
    def pid(self) -> int | None:
        """The process id (None before start)."""
        return self._pid

    @property
    def sentinel(self) -> int:
        """Becomes ready when the process ends."""
        return self.process.sentinel

    def poll_exitcode(self) -> int | None:
        """The exit code, or None while the process runs (or was never started)."""
        if self.started and not self.closed and self._exitcode is None:
            self._exitcode = self.process.exitcode
        return self._exitcode

    def is_alive(self) -> bool:
        """True while the process runs."""
        return self.started and not self.closed and self.poll_exitcode() is None

    @property
    def idle(self) -> bool:
        """No command of ours is waiting in or running on the child."""
        return not self.outstanding

    def submit(self, msg: tuple) -> None:
        """Send a command now if the child is ready, else when it is."""
        self.outstanding.add(msg[0])
        if self.ready:
            self.conn.send(msg)
        else:
            self.queued.append(msg)

    def on_ready(self) -> None:
        """The child finished building its worker: flush the queued commands."""
        self.ready = True
        queued, self.queued = self.queued, []
        for msg in queued:
            self.conn.send(msg)

    def recv(self, timeout: float) -> tuple[str, int, int, Any]:
        """One message from the child. A failure part-way through leaves the handle ``broken``."""
        try:
            kind, seq, version, payload = self.conn.recv()
            if kind == "batches":
                parts: list[Any] = []
                for size in payload:
                    if not self.conn.poll(timeout):
                        raise TimeoutError(f"worker {self.worker_number} stopped part-way through sending a batch")
                    buf = bytearray(size)
                    self.conn.recv_bytes_into(buf)
                    parts.append(buf)
                payload = pickle.loads(parts[0], buffers=parts[1:])
        except BaseException as exc:
            self.broken = f"its message stream was cut ({type(exc).__name__})"
            raise
        return kind, seq, version, payload

    def exitcode(self, wait: float = 1.0) -> int | None:
        """The exit code after waiting up to ``wait`` seconds for the process to end."""
        if self.started and not self.closed and self._exitcode is None:
            self.process.join(wait)
        return self.poll_exitcode()

    def kill(self, wait: float = 1.0) -> None:
        """Terminate, then kill, bounded by ``wait`` seconds each."""
        stop_processes([self], timeout=0.0, grace=wait)


def stop_processes(handles: Sequence[WorkerProcess], *, timeout: float = 5.0, grace: float = 2.0) -> None:
    """Bounded, idempotent shutdown: ask idle workers to stop and terminate busy ones; join for up
    to ``timeout`` seconds in all; then terminate, and after ``grace`` more seconds kill."""
    for h in handles:
        if h is not None and not h.started:
            h.conn.close()
    handles = [h for h in handles if h is not None and h.started and not h.closed]
    for h in handles:
        if h.poll_exitcode() is not None:
            continue
        if h.ready and h.idle and timeout > 0:
            try:
                h.conn.send("stop")
                continue
            except (OSError, ValueError):
                pass
        h.process.terminate()
    for stage, limit in (("join", timeout), ("terminate", grace), ("kill", grace)):
        deadline = time.monotonic() + limit
        for h in handles:
            if h.poll_exitcode() is None:
                h.process.join(max(0.0, deadline - time.monotonic()))
        alive = [h for h in handles if h.poll_exitcode() is None]
        if not alive:
            break
        for h in alive:
            if stage == "join":
                h.process.terminate()
            elif stage == "terminate":
                h.process.kill()
    for h in handles:
        try:
            h.conn.close()
        except OSError:  # pragma: no cover
            pass
        if h.poll_exitcode() is not None:
            h.process.close()
            h.closed = True


def count_agent_steps(worker: Any, counter: Any) -> None:
    """Make the worker's agent add one to ``counter.steps`` per ``get_actions`` call: the progress a
    sampler watches (a worker process's reports, a Ray actor's ``progress``). Once per agent object
    (the agent is the process's own copy); an agent that refuses new attributes is not counted."""
    agent = getattr(worker, "agent", None)
    if agent is None or getattr(agent, "_corral_counted", False):
        return
    inner = agent.get_actions

    def get_actions(observations: Any) -> Any:
        counter.steps += 1
        return inner(observations)

    try:
        agent.get_actions = get_actions
        agent._corral_counted = True
    except (AttributeError, TypeError):  # pragma: no cover - __slots__ or a frozen object
        pass


#: The help of the failure settings every sampler of worker processes (or actors) has: the same words,
#: as their semantics are the same.
TIMEOUT_HELP = ("seconds a worker may show no progress (no answer and no environment step) before it counts as "
                "stuck and is stopped; checked once a second, so use a few seconds at least")
ON_WORKER_FAILURE_HELP = ("when a worker dies, raises or is stuck: raise (a WorkerError; the sampler shuts down) or "
                          "restart (rebuild it with an advanced seed stream and resample its share)")
MAX_RESTARTS_HELP = "restarts allowed per worker (on_worker_failure=restart) before raising"


#: The least memory one worker process takes, in MiB: it imports torch, gymnasium and the environment
#: (about 240 MiB resident on Linux with CartPole, 170 MiB of it its own).
WORKER_PROCESS_MIB = 150


def check_room_for_workers(n_workers: int, option: str = "sampler.n_workers") -> None:
    """Raise a one-line :class:`ConfigError` before any process starts when ``n_workers`` worker
    processes cannot fit in this machine's available memory (at :data:`WORKER_PROCESS_MIB` each):
    the kernel's OOM killer would end the run, trainer included, without a line."""
    cpus = os.cpu_count() or 1
    check_room_for_processes(n_workers, WORKER_PROCESS_MIB, option, "worker processes",
                             "each imports torch and the environment",
                             f"give fewer ({option}={cpus} uses its {cpus} CPUs)")


__all__ = ["MAX_RESTARTS_HELP", "ON_WORKER_FAILURE_HELP", "TIMEOUT_HELP", "WORKER_PROCESS_MIB", "WorkerProcess",
           "check_room_for_workers", "count_agent_steps", "describe_exit",
           "sample_steps", "stop_processes", "worker_main"]
