"""``sampler=action_server``: worker processes step environments; one batched policy in this process.

rlpyt's GPU sampler, for every corral worker whose agent needs only the calls an
:class:`~corral.parallel.action_proxy.ActionProxy` forwards. Worker processes are the multiprocessing
sampler's (same start-up, commands, episode transport, bounded waits, failure reports, restarts,
shutdown); what differs is the agent each worker holds: a proxy that posts observations to a
shared-memory slot and waits for actions. A thread of this process
(:class:`~corral.parallel.action_server.ActionServer`) keeps the real policy on ``device`` and answers
every posting worker with one batched forward pass per step. Agent updates go straight to that
policy (parameters are never shipped to the workers).

Same seed, same episodes: each environment slot keeps its own noise stream and recurrent state on
the server (:class:`~corral.parallel.slot_state.AgentPool`), and corral's MLP forward is batch
invariant, so on cpu the episodes equal the local sampler's, array for array.

Failures read as the multiprocessing sampler's: the server answers a group once every busy worker
of it has posted, so while one worker hangs in its environment the others wait for the server;
that wait counts as neither's lack of progress (the server tells the waiting worker's proxy and
this sampler that it is holding it back), so the hung worker alone runs out of ``timeout``, is
named ("made no progress") and, with ``on_worker_failure=restart``, is the only one restarted. A
call of the server's policy that does not return within ``timeout`` (a forward pass, most often; or
a control call: the ``reset`` that rides along with it, a worker's ``seed``, ``get_sampling_state``
(also the one that takes a dead worker's state out before it is restarted), the agent update's
``set_param_values``) is the server's fault, not that of the workers waiting for
it: the error (:class:`ServerHung`) names that call, no worker is restarted, and the shutdown does
not wait for the call (it may return later, or never; see
:meth:`~corral.parallel.action_server.ActionServer.close`).

Likewise a call of the server's policy that moves workers' slot state in or out of it and raises
(``get_sampling_state``, ``set_sampling_state``, a queued ``reset``; within a forward pass, a
worker's ``seed``, an agent update, or a restart, which takes the dead worker's state out) is the
policy's fault: the error (:class:`ServerPolicyRaised`) is one line naming that call, the workers
whose rows it moved, what it was made for and the policy's error, with the policy's traceback (as
for an agent update that raises); no worker is blamed or restarted (each would meet it again). So is
a forward pass whose ``get_actions`` raises, and a call of the policy's that a worker asks for and
that raises (``seed``, ``reset``, ``get_sampling_state`` when the sampler's state is saved, or a
user's worker asking its agent for ``get_param_values`` / ``set_param_values``): every worker
waiting for it is answered with the error, but the policy, not the worker, is named.

``sampler=alternating`` (:mod:`corral.plugins.samplers.alternating`) is this sampler with two
groups of workers.
"""

from __future__ import annotations

import copy
import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.errors import ConfigError, WorkerError
from corral.framework.policy import Policy
from corral.framework.worker import UpdateFailure, WorkerFactory, update_error
from corral.parallel.action_proxy import PROXY_METHODS, ActionProxy, ServedWorkerFactory
from corral.parallel.action_server import ActionServer, PolicyCallFailed, PolicyFailure, ServerBusy, ServerCall
from corral.plugins.samplers.multiprocessing import (
    MultiprocessingSampler,
    MultiprocessingSamplerConfig,
    _Failure,
)

log = logging.getLogger(__name__)
#: Seconds the sampler waits, at most, for a call of the server's to have run ``timeout`` seconds
#: when a worker waiting for it ran out of time just before (the worker's clock started a little
#: earlier than the call; its progress reports come once a second).
_SETTLE_S = 1.0
DEVICES_HELP = "where the server's policy runs: auto (cuda when available, else cpu), cpu, cuda or cuda:N"


@dataclass
class ActionServerSamplerConfig(MultiprocessingSamplerConfig):
    """Settings of the action-server sampler (the multiprocessing sampler's, plus the server's)."""

    device: str = field(default="auto", metadata=check(pattern=r"auto|cpu|cuda(:[0-9]+)?", describe="auto, cpu, cuda or cuda:N", help=DEVICES_HELP))
    slot_mib: int = field(
        default=16,
        metadata=check(ge=1, help="MiB reserved per worker for its observations and for its actions and agent infos "
                          "(shared memory; only what is used takes memory)"),
    )
    spin_us: int = field(
        default=200,
        metadata=check(ge=0, help="microseconds a waiting worker (and the server) polls for its answer, yielding the CPU "
                          "between polls, before sleeping on its semaphore; saves a process wake-up per step "
                          "(0: sleep at once)"),
    )


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; anything else is checked."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if re.fullmatch(r"cuda(:[0-9]+)?", device):
        if not torch.cuda.is_available():
            raise ConfigError(f"sampler.device={device} but torch sees no GPU; use sampler.device=cpu (or auto)")
        n = torch.cuda.device_count()
        index = torch.device(device).index
        if index is not None and index >= n:
            raise ConfigError(f"sampler.device={device} but torch sees {n} GPU(s): use cuda:0 to cuda:{n - 1}")
        return device
    raise ConfigError(f"sampler.device must be auto, cpu, cuda or cuda:N, got {device!r}")


def check_worker_class(worker_class: Any, sampler: str) -> None:
    """Refuse a worker whose agent needs more than the proxy forwards (its ``agent_methods``)."""
    needs = set(getattr(worker_class, "agent_methods", ()) or ())
    extra = sorted(needs - PROXY_METHODS)
    if extra:
        name = getattr(worker_class, "__name__", str(worker_class))
        raise ConfigError(
            f"sampler={sampler} cannot run {name}: its agent needs {extra}, but under an action server a worker's "
            f"agent is a proxy offering only {sorted(PROXY_METHODS)}; use sampler=multiprocessing (or local) "
            "with this worker"
        )


def device_name(device: str) -> str:
    """The GPU's name for ``cuda`` or ``cuda:N`` (what the start-up line shows)."""
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def server_policy(policy: Policy, device: str) -> Policy:
    """The server's own copy of ``policy``, on ``device``."""
    copied = copy.deepcopy(policy)
    if device != "cpu" and hasattr(copied, "to"):
        copied = copied.to(device)
    return copied


class ActionServerSampler(MultiprocessingSampler):
    """Worker processes with proxy agents, served by one batched policy in this process.

    Built like the other samplers::

        ActionServerSampler(agents=policy, envs=env, max_episode_length=500, n_workers=2,
                            worker_class=VecWorker, worker_args=dict(n_envs=8))
        ActionServerSampler.from_worker_factory(factory, agents=policy, envs=env, device="cpu")

    In a script, build it under ``if __name__ == "__main__":``, as the multiprocessing sampler.

    Options are the multiprocessing sampler's (``start_method``, ``timeout``,
    ``on_worker_failure``, ``max_restarts``, ``cpu_affinity``) plus ``device``, ``slot_mib`` and
    ``spin_us``.

    Attributes:
        device: where the server's policy runs.
        server: the :class:`~corral.parallel.action_server.ActionServer` (``server.n_served_steps``
            counts batched forward passes).
    """

    #: Groups of workers served in turn (2: the alternating sampler).
    n_groups: int = 1
    option_name: str = "action_server"

    def __init__(self, agents: Any, envs: Any, *, device: str = "auto", slot_mib: int = 16, spin_us: int = 200,
                 n_workers: int = 2, worker_factory: WorkerFactory | None = None, **kwargs: Any) -> None:
        self.server: ActionServer | None = None
        self.device = resolve_device(device)
        if slot_mib < 1:
            raise ConfigError(f"sampler.slot_mib must be >= 1, got {slot_mib}")
        if spin_us < 0:
            raise ConfigError(f"sampler.spin_us must be >= 0, got {spin_us}")
        self._spin_s = spin_us * 1e-6
        self._slot_bytes = int(slot_mib) << 20
        worker_class = worker_factory.worker_class if worker_factory is not None else kwargs.get("worker_class")
        if worker_class is not None:
            check_worker_class(worker_class, self.option_name)
        count = worker_factory.n_workers if worker_factory is not None else n_workers
        if count < self.n_groups:
            raise ConfigError(f"sampler={self.option_name} serves {self.n_groups} groups of workers and needs "
                              f"sampler.n_workers >= {self.n_groups}, got {count}")
        self._recurrent = False
        log.info("%s sampler: the policy runs on %s%s (sampler.device=%s)", self.option_name, self.device,
                 f" ({device_name(self.device)})" if self.device.startswith("cuda") else "", device)
        super().__init__(agents, envs, n_workers=n_workers, worker_factory=worker_factory, **kwargs)

    # ------------------------------------------------------------------ hooks into the process sampler
    def groups(self) -> list[list[int]]:
        """Worker numbers of each group (contiguous blocks, the first groups one larger)."""
        n, g = self.n_workers, self.n_groups
        sizes = [n // g + (1 if k < n % g else 0) for k in range(g)]
        out, start = [], 0
        for size in sizes:
            out.append(list(range(start, start + size)))
            start += size
        return out

    def _make_server(self) -> ActionServer:
        handles = self._handles  # not the sampler: the server must not keep it alive
        timeout = self.timeout

        def busy(i: int) -> bool:
            h = handles[i]
            return h is not None and bool(h.outstanding)

        def on_hold(i: int) -> None:
            # Worker i waits for the server, which waits for a busy worker of its group: no lack of
            # progress of worker i's (the busy one, if stuck, runs out of time and is the one named).
            h = handles[i]
            if h is not None and h.outstanding:
                h.deadline = max(h.deadline, time.monotonic() + timeout)

        device = self.device
        server = ActionServer(self._ctx, self.n_workers, self.groups(), lambda p: server_policy(p, device), busy,
                              obs_bytes=self._slot_bytes, resp_bytes=self._slot_bytes, timeout=self.timeout,
                              spin_s=self._spin_s, on_hold=on_hold)
        server.start()
        return server

    def _launch(self, i: int) -> None:
        if self.server is None:
            self.server = self._make_server()
        elif self._handles[i] is not None:  # a restart: the old process's slot state goes
            old = self._handles[i]
            assert old is not None
            old.kill()
            try:
                self.server.restart_slot(i)
            except (ServerBusy, PolicyCallFailed) as exc:  # the restart counted by _on_failure does not happen
                self._restarts[i] -= 1
                self.n_restarts -= 1
                activity = f"restarting worker {i}"
                raise _Failure(self._server_hung(exc.call, activity) if isinstance(exc, ServerBusy)
                               else self._policy_raised(exc.failure, activity)) from None
        super()._launch(i)
        self.server.ring()

    def _process_factory(self, i: int) -> Any:
        assert self.server is not None
        return ServedWorkerFactory(self.worker_factory, self.server.endpoint(i))

    def _release(self, i: int, seqs: Any) -> None:
        super()._release(i, seqs)
        if self.server is not None:
            self.server.ring()  # a reply came: the worker is no longer busy

    def _call(self, commands: dict[int, tuple[str, Any]], agent_update: Any, env_update: Any,
              activity: str) -> dict[int, Any]:
        """Apply the agent update to the server's policy; workers get a proxy when the agent is new."""
        if self._closed:
            raise RuntimeError("this sampler was shut down; build a new one")
        n = self.n_workers
        if isinstance(agent_update, list) and len(agent_update) != n:
            raise ConfigError(f"a list of {len(agent_update)} agent_updates was given for {n} workers; a list must "
                              "have exactly one item per worker (or pass a single object to broadcast it)")
        assert self.server is not None
        try:
            fresh = self.server.apply_agent_update(agent_update, n)
        except ServerBusy as exc:
            self.shutdown_worker()
            raise self._server_hung(exc.call, activity) from None
        except PolicyCallFailed as exc:  # a move of slot state the update made, not the update itself
            self.shutdown_worker()
            raise self._policy_raised(exc.failure, activity) from None
        except Exception as exc:  # noqa: BLE001 - the same WorkerError as every sampler's
            tb = traceback.format_exc()
            raise update_error(self.option_name, None, UpdateFailure.of("agent update", exc), tb) from None
        worker_update: Any = None
        if fresh:
            items = agent_update if isinstance(agent_update, list) else [agent_update] * n
            self._recurrent = any(bool(getattr(u, "recurrent", False)) for u in items if isinstance(u, Policy))
            worker_update = [ActionProxy(i, self._recurrent, deterministic=bool(getattr(u, "deterministic", False)))
                             if isinstance(u, Policy) else None for i, u in enumerate(items)]
        elif agent_update is not None:
            self.agent_version += 1  # applied here: replies to older requests are still told apart
        return super()._call(commands, worker_update, env_update, activity)

    # ------------------------------------------------------------------ a server that does not answer
    def _error_stuck(self, i: int, activity: str) -> WorkerError:
        """Worker ``i`` shows no progress: the server's fault when a call of its policy has run
        ``timeout`` seconds; not yet anyone's when worker ``i`` waits for a call that has not."""
        return self._blame_server(i, activity, gave_up=False) or super()._error_stuck(i, activity)

    def _on_failure(self, i: int, commands: dict[int, tuple[str, Any]], activity: str, error: WorkerError) -> None:
        """A failure that is the server's raises :class:`ServerHung` (restarting a worker would not
        help: the new one would wait for the same server); one that may yet be is looked at again."""
        if isinstance(error, ServerHung):
            raise _Failure(error)
        if isinstance(error, _WaitForServer):
            self._handle(i).deadline = error.until
            return
        if self._gave_up(i):  # its proxy waited in vain
            hung = self._blame_server(i, activity, gave_up=True)
            if isinstance(hung, ServerHung):
                raise _Failure(hung)
        super()._on_failure(i, commands, activity, error)

    def _drain(self, i: int, results: dict[int, Any], activity: str) -> WorkerError | None:
        """The process sampler's, except that a worker whose agent update failed only because its
        proxy's wait for the server ran out (a ``seed`` of the server's policy that does not return)
        is not at fault: :class:`ServerHung` then, as for any other request the server left unanswered.
        Nor is a worker that reports the failure of a call of the server's policy that moved slot state
        for it (:class:`ServerPolicyRaised`, raised at once: a restarted worker would meet it again)."""
        try:
            error = super()._drain(i, results, activity)
        except _Failure:
            raised = self._server_raised(i, activity)
            if raised is not None:
                raise _Failure(raised) from None
            if self._gave_up(i):
                hung = self._blame_server(i, activity, gave_up=True)
                if isinstance(hung, ServerHung):
                    raise _Failure(hung) from None
            raise
        if error is not None:
            raised = self._server_raised(i, activity)
            if raised is not None:
                raise _Failure(raised)
        return error

    def _server_raised(self, i: int, activity: str) -> "ServerPolicyRaised | None":
        """The error of the call of the server's policy that raised while worker ``i`` waited for the
        answer to its latest request (worker ``i`` reports it as its own failure); None when none did
        (a record of an earlier request's is not this failure's:
        :meth:`~corral.parallel.action_server.ActionServer.failure_of`)."""
        failed = self.server.failure_of(i) if self.server is not None else None
        if failed is None:
            return None
        return self._policy_raised(failed, activity)

    def _gave_up(self, i: int) -> bool:
        """Whether worker ``i``'s failure is its proxy's wait for the server running out: its slot's
        mark (:meth:`~corral.parallel.action_server.ActionServer.gave_up`), not the text of the error
        (a worker may wrap the proxy's ``TimeoutError`` in an error of its own)."""
        return self.server is not None and self.server.gave_up(i)

    def _blame_server(self, i: int, activity: str, gave_up: bool) -> WorkerError | None:
        """Why worker ``i`` (``gave_up``: its proxy's wait for an answer timed out; else: it shows no
        progress) is not at fault: :class:`ServerHung` when a call of the server's policy has run
        ``timeout`` seconds (or, just returned, ran that long); :class:`_WaitForServer` when it waits
        for a call that has not run that long yet; None when the server is not to blame."""
        server = self.server
        if server is None:
            return None
        call = server.call
        if call is not None:
            remaining = call.started + self.timeout - time.monotonic()
            if remaining > 0 and not gave_up:
                if server.waiting(i) or remaining <= _SETTLE_S:
                    return _WaitForServer(call.started + self.timeout)
                return None
            if 0 < remaining <= _SETTLE_S:  # gave up a moment before the call is `timeout` old
                time.sleep(remaining)
            if remaining <= _SETTLE_S and server.call is call:
                return self._server_hung(call, activity)
        # A call seen running has just returned (after `timeout` s, or the worker had given up on it):
        # or, for a worker that gave up, the last call took that long and returned since.
        last = server.last_call
        if (call is not None or gave_up) and last is not None and last.ended is not None \
                and last.seconds() >= self.timeout and time.monotonic() - last.ended <= self.timeout + _SETTLE_S:
            return self._server_hung(last, activity)  # it returned, too late for worker i
        return None

    def _server_hung(self, call: ServerCall | None, activity: str) -> "ServerHung":
        """The one line naming the server's ``call`` that did not return within ``timeout``."""
        if call is None:  # its lock was held that long outside the policy's calls
            return ServerHung(
                f"{self.option_name} sampler: the action server's thread (on {self.device}) did not let go of its "
                f"lock within {self.timeout:g} s while {activity}; every worker waits for it, so none is at fault "
                "and none was restarted; this is a bug of corral's: please report it with the log of the run")
        workers = list(call.workers)
        who = f"worker {workers[0]}" if len(workers) == 1 else f"workers {workers}"
        if call.what == "get_actions":
            what, slow = f"forward pass (the policy's get_actions for {who}, on {self.device})", "forward passes"
        else:
            what, slow = f"call of the policy's {call.what} (for {who}, on {self.device})", f"{call.what} calls"
        return ServerHung(
            f"{self.option_name} sampler: the action server's {what} did not return within {self.timeout:g} s "
            f"while {activity}; every worker waits for it, so none is at fault and none was restarted; check the "
            f"policy's {call.what} (what it blocks on: a lock, a device that stopped answering), or raise "
            f"sampler.timeout={self.timeout:g} if its {slow} are this slow")

    def _policy_raised(self, failed: PolicyFailure, activity: str) -> "ServerPolicyRaised":
        """The one line naming the server's call of the policy that raised (``failed``), with the
        policy's traceback, as for an agent update that raises."""
        call, within = failed.call, failed.within
        made_for = ""
        if within is not None:
            made_for = (f", made for a forward pass of {_who(within.workers)}" if within.what == "get_actions"
                        else f", made for the policy's {within.what} for {_who(within.workers)}")
        return ServerPolicyRaised(
            f"{self.option_name} sampler: the action server's call of the policy's {call.what} (for "
            f"{_who(call.workers)}, on {self.device}{made_for}) raised {failed.summary} while "
            f"{activity}; the server's policy is at fault, not a worker, so none was restarted; fix the policy's "
            f"{call.what}, {_purpose(call.what, failed.moves)}",
            remote_traceback=failed.traceback)

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        try:
            super()._shutdown()
        finally:
            if self.server is not None:
                self.server.close()
            # The processes' handles hold the semaphores they were started with: drop them so the
            # semaphores are freed now.
            self._handles[:] = [None] * len(self._handles)


class ServerHung(WorkerError):
    """A call of the action server's policy (a forward pass, most often) did not return within the
    sampler's ``timeout``: the server is at fault, not the workers waiting for it (``worker_number``
    is None)."""


class ServerPolicyRaised(WorkerError):
    """A call of the action server's policy raised: a forward pass's ``get_actions``, a control call a
    worker asked for (``seed``, ``reset``, ``get_sampling_state``, ``get_param_values``,
    ``set_param_values``), or a call that moves workers' slot state in or out of it
    (``get_sampling_state``, ``set_sampling_state``, a queued ``reset``): the server's policy is at
    fault, not the workers it was made for (``worker_number`` is None); ``remote_traceback`` is the
    policy's."""


#: What the server calls each of the policy's methods for when it moves workers' slot state.
_MOVES = {
    "get_sampling_state": "which the server calls to take workers' sampling state out of the policy",
    "set_sampling_state": "which the server calls to put workers' sampling state back into the policy",
    "reset": "which the server calls to start the new episodes of a worker whose state was out of the policy",
}


#: What the server calls each of the policy's methods for when a worker asks for it.
_SERVES = {
    "get_actions": "which the server calls for each forward pass of its workers",
    "seed": "which the server calls when a worker seeds its environments' rows (when it gets the agent)",
    "reset": "which the server calls when new episodes of a worker's environments start",
    "get_sampling_state": "which the server calls when a worker asks its agent for its sampling state (to save it)",
    "get_param_values": "which the server calls when a worker asks its agent for its parameters",
    "set_param_values": "which the server calls when a worker sets its agent's parameters",
}


def _purpose(what: str, moves: bool) -> str:
    """What the server calls the policy's ``what`` for (``moves``: to move workers' slot state)."""
    if moves:
        return _MOVES.get(what, "which the server calls to move workers in and out of the policy")
    return _SERVES.get(what, "which the server calls for its workers")


def _who(workers: tuple[int, ...]) -> str:
    """``worker 1`` or ``workers [0, 1]``."""
    return f"worker {workers[0]}" if len(workers) == 1 else f"workers {list(workers)}"


class _WaitForServer(WorkerError):
    """Internal: the worker waits for a call of the server's that has not run ``timeout`` seconds
    yet; it is looked at again at ``until`` (``time.monotonic()``)."""

    def __init__(self, until: float) -> None:
        super().__init__("waiting for the action server")
        self.until = until


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Refuse, before any worker starts, a worker whose agent needs more than an action-server proxy."""
    sampler = cfg.sampler.name
    if sampler not in ("action_server", "alternating"):
        return
    from corral.framework.plugins import get_registry

    check_worker_class(get_registry().get("worker", cfg.worker.name).factory, sampler)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=action_server``."""
    register("sampler", "action_server", ActionServerSampler, config=ActionServerSamplerConfig,
             help="worker processes step environments; one batched policy forward per step in this process "
                  "(rlpyt's GPU sampler)")
