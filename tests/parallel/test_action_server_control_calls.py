"""Calls of the action server's policy other than the forward pass, that do not return; and the
bounded waits for a server whose thread is stuck (ServerBusy).

Besides ``get_actions`` the server runs the policy's control calls: ``seed`` (a worker given a new
agent seeds its slots), ``reset`` (riding along with a worker's next ``get_actions``),
``get_sampling_state`` (``state_dict``) and the agent update itself (``set_param_values`` at every
``obtain_samples``). Any of them may block for good (a lock, a device that stopped answering). Each
must end in one line that names that call (not the forward pass, not a worker, never a hang), with
no worker restarted, and nothing of the sampler's left running or named in ``/dev/shm``.

So must the calls that move slot state between the workers that share a copy of the policy
(``get_sampling_state`` out of it, ``set_sampling_state`` into it, a ``reset`` queued for a worker
that was not in it): the server makes them within a forward pass (when the set of posting workers
changes) or an agent update (one item per worker), and the line names them, not the call they were
made for.

ServerBusy: the sampler waits for the serving thread (to restart a worker's slot, to apply an agent
update) only ``timeout`` seconds; a thread stuck in a forward pass then is named the same way.

Real worker processes (spawn), real CartPole; the policy is an MLPPolicy whose call blocks in this
process (the server's copy of it runs here), until the test releases it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from corral import ActionServerSampler, AlternatingSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError
from corral.plugins.workers.default import DefaultWorker
from corral.testing.modules import import_path
from corral.testing.processes import interruptible

TIMEOUT = 2.0
#: ``tests/conf/action_server_checks.py`` (``tests`` is not an importable package).
checks = import_path(Path(__file__).resolve().parents[2] / "tests" / "conf" / "action_server_checks.py",
                     "action_server_checks")
our_segments, serving_threads = checks.our_segments, checks.serving_threads

#: The server runs a deep copy of the policy: what the test controls lives at module level.
RELEASE = threading.Event()
STUCK = threading.Event()
_lock = threading.Lock()
_state: dict[str, Any] = {"method": None, "stuck": 0, "returned": 0, "slow": {}, "slowed": []}


def arm(method: str | None) -> None:
    """The policy's next call of ``method`` (``get_actions``, ``seed``, ...) blocks until :data:`RELEASE`."""
    with _lock:
        _state.update(method=method, stuck=0, returned=0, slow={}, slowed=[])
    STUCK.clear()
    RELEASE.clear()


def slow_down(**seconds: float) -> None:
    """The policy's next call of each method named takes that many seconds more (then returns)."""
    with _lock:
        _state.update(slow=dict(seconds), slowed=[])


class BlockingPolicy(MLPPolicy):
    """An MLPPolicy whose call that :func:`arm` names blocks once, until the test sets :data:`RELEASE`."""

    def _maybe_block(self, method: str) -> None:
        with _lock:
            block = _state["method"] == method
            if block:
                _state["method"] = None
            delay = _state["slow"].pop(method, None)
        if delay is not None:
            time.sleep(delay)
            _state["slowed"].append(method)
        if block:
            _state["stuck"] += 1
            STUCK.set()
            RELEASE.wait(120)  # bounded, so a broken close cannot hang the suite for ever
            _state["returned"] += 1

    def get_actions(self, observations: Any) -> Any:
        self._maybe_block("get_actions")
        return super().get_actions(observations)

    def seed(self, seeds: Any) -> None:
        self._maybe_block("seed")
        super().seed(seeds)

    def reset(self, dones: Any = None) -> None:
        self._maybe_block("reset")
        super().reset(dones)

    def set_param_values(self, params: Any) -> None:
        self._maybe_block("set_param_values")
        super().set_param_values(params)

    def get_sampling_state(self) -> Any:
        self._maybe_block("get_sampling_state")
        return super().get_sampling_state()

    def set_sampling_state(self, state: Any) -> None:
        self._maybe_block("set_sampling_state")
        super().set_sampling_state(state)


leaves_nothing_behind = checks.leaves_nothing_behind  # autouse: no process or segment outlives a test


@pytest.fixture
def policy() -> Iterator[BlockingPolicy]:
    arm(None)
    yield BlockingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    RELEASE.set()  # a call still stuck returns now (after every check of the test)


def message(sampler: str, call: str, who: str, activity: str) -> re.Pattern[str]:
    """The one line naming the server's ``call`` (``call of the policy's seed``, ``forward pass``)."""
    if call == "get_actions":
        what, slow = rf"forward pass \(the policy's get_actions for {who}, on cpu\)", "forward passes"
    else:
        what, slow = rf"call of the policy's {call} \(for {who}, on cpu\)", f"{call} calls"
    return re.compile(
        rf"{sampler} sampler: the action server's {what} did not return within 2 s while {re.escape(activity)}; "
        rf"every worker waits for it, so none is at fault and none was restarted; check the policy's {call} "
        rf"\(what it blocks on: a lock, a device that stopped answering\), or raise sampler.timeout=2 if its "
        rf"{slow} are this slow")


def hang(sampler_class: type, policy: BlockingPolicy, method: str, act: Callable[[Any, BlockingPolicy], Any],
         on_worker_failure: str = "raise", during: Callable[[Any], None] | None = None, **options: Any
         ) -> tuple[WorkerError, threading.Thread, float, Any]:
    """Sample once, arm ``method``, then ``act(sampler, policy)``: the error it raised, the serving thread
    (still stuck), the seconds it took to raise and shut down, and the sampler. ``during(sampler)``
    runs in a thread of its own once the call is stuck; ``options`` go to the sampler."""
    before = serving_threads()
    sampler = sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                            seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure=on_worker_failure, **options)
    during_thread: threading.Thread | None = None
    with sampler:
        thread, semaphores = checks.sample_once(sampler, policy, before)
        arm(method)
        if during is not None:
            during_thread = threading.Thread(target=lambda: STUCK.wait(30) and during(sampler), daemon=True)
            during_thread.start()
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            act(sampler, policy)
        took = time.monotonic() - t0
    if during_thread is not None:
        during_thread.join(30)
    checks.assert_semaphores_freed(semaphores)
    return info.value, thread, took, sampler


def check_named_and_released(error: WorkerError, pattern: re.Pattern[str], thread: threading.Thread, took: float,
                             sampler: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The one line, nothing left of the sampler's, and the stuck call may return after the shutdown."""
    text = str(error)
    assert pattern.fullmatch(text), text
    assert "\n" not in text and error.worker_number is None and error.remote_traceback is None
    assert took < 30, f"raising and shutting down took {took:.1f} s"
    assert sampler.n_restarts == 0
    assert multiprocessing.active_children() == []
    assert our_segments() == set(), "the stuck server's segments are still named in /dev/shm"
    assert thread.is_alive() and _state["stuck"] == 1 and _state["returned"] == 0, "the call was not stuck"
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="corral.parallel.action_server"):
        RELEASE.set()  # the stuck call returns, after the shutdown
        thread.join(30)
    assert not thread.is_alive(), "the serving thread did not end once its call returned"
    assert _state["returned"] == 1
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], noisy


def sample(sampler: Any, policy: BlockingPolicy) -> Any:
    return sampler.obtain_samples(1, 400, policy.get_param_values())


def sample_with_a_new_policy(sampler: Any, policy: BlockingPolicy) -> Any:
    """A new Policy: every worker gets a fresh proxy, which seeds its slots on the server."""
    return sampler.obtain_samples(1, 400, policy)


def save_state(sampler: Any, policy: BlockingPolicy) -> Any:
    return sampler.state_dict()


def sample_with_params_per_worker(sampler: Any, policy: BlockingPolicy) -> Any:
    """One item per worker (distinct objects): each worker gets a copy of the policy of its own, so the
    update moves every worker's slot state out of the copy it shared (``get_sampling_state``) and the
    next forward pass moves it into the new copy (``set_sampling_state``, then the queued ``reset``)."""
    return sampler.obtain_samples(1, 400, [policy.get_param_values(), policy.get_param_values()])


#: Who a call of the server's is for: under action_server one batch holds every worker that has posted
#: (both, most often); under alternating a group holds one of the two workers.
SOME = r"(worker \d|workers \[0, 1\])"

# (sampler, blocked call, what the test does, who the line names, activity)
CONTROL_CASES = [
    (ActionServerSampler, "seed", sample_with_a_new_policy, r"worker \d", "sampling (obtain_samples)"),
    (AlternatingSampler, "seed", sample_with_a_new_policy, r"worker \d", "sampling (obtain_samples)"),
    (ActionServerSampler, "reset", sample, SOME, "sampling (obtain_samples)"),
    (AlternatingSampler, "reset", sample, r"worker \d", "sampling (obtain_samples)"),
    (ActionServerSampler, "set_param_values", sample, r"workers \[0, 1\]", "sampling (obtain_samples)"),
    (AlternatingSampler, "set_param_values", sample, r"workers \[0, 1\]", "sampling (obtain_samples)"),
    (AlternatingSampler, "get_sampling_state", save_state, r"worker \d",
     "saving its sampling state (state_dict)"),
]
CONTROL_IDS = ["action_server-seed", "alternating-seed", "action_server-reset", "alternating-reset",
               "action_server-set_param_values", "alternating-set_param_values", "alternating-get_sampling_state"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "method", "act", "who", "activity"), CONTROL_CASES, ids=CONTROL_IDS)
def test_a_hung_control_call_names_that_call_of_the_server(
        policy: BlockingPolicy, sampler_class: type[ActionServerSampler], method: str, act: Callable[[Any, BlockingPolicy], Any],
        who: str, activity: str, caplog: pytest.LogCaptureFixture) -> None:
    error, thread, took, sampler = hang(sampler_class, policy, method, act)
    check_named_and_released(error, message(sampler_class.option_name, method, who, activity), thread, took,
                             sampler, caplog)


# (sampler, blocked call, what the test does, who the line names). Under action_server the two workers
# share one copy of the policy; the last to finish a batch is served alone at its end, so the next
# batch's first forward pass takes that worker's state out (get_sampling_state) and puts both workers'
# in (set_sampling_state). Under alternating each worker has a copy of its own: only an update per
# worker moves state.
SWAP_CASES = [
    (ActionServerSampler, "get_sampling_state", sample, r"worker \d"),
    (ActionServerSampler, "set_sampling_state", sample, r"workers \[0, 1\]"),
    (ActionServerSampler, "get_sampling_state", sample_with_params_per_worker, r"worker \d"),
    (ActionServerSampler, "reset", sample_with_params_per_worker, r"worker \d"),
    (AlternatingSampler, "get_sampling_state", sample_with_params_per_worker, r"worker 0"),
    (AlternatingSampler, "set_sampling_state", sample_with_params_per_worker, r"worker \d"),
    (AlternatingSampler, "reset", sample_with_params_per_worker, r"worker \d"),
]
SWAP_IDS = ["action_server-forward-get_sampling_state", "action_server-forward-set_sampling_state",
            "action_server-update-get_sampling_state", "action_server-queued-reset",
            "alternating-update-get_sampling_state", "alternating-forward-set_sampling_state",
            "alternating-queued-reset"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "method", "act", "who"), SWAP_CASES, ids=SWAP_IDS)
def test_a_hung_move_of_slot_state_names_that_call_of_the_server(
        policy: BlockingPolicy, sampler_class: type[ActionServerSampler], method: str,
        act: Callable[[Any, BlockingPolicy], Any], who: str, caplog: pytest.LogCaptureFixture) -> None:
    """Not the forward pass or the agent update the move was made for: the call that hung."""
    error, thread, took, sampler = hang(sampler_class, policy, method, act)
    check_named_and_released(error, message(sampler_class.option_name, method, who, "sampling (obtain_samples)"),
                             thread, took, sampler, caplog)


@pytest.mark.timeout(120)
def test_a_slow_move_of_slot_state_does_not_count_against_the_forward_pass(policy: BlockingPolicy) -> None:
    """Each call of the server's is timed on its own: a move of slot state and the forward pass it was made
    for, each well within ``timeout`` but longer than it together, are no hung call (the pass is timed
    afresh once the move returns, and the workers are told so). A timeout of its own, 3 x the module's:
    the 40% of it left to each call is then 2.4 s, which a busy machine (the suite's other workers beside
    it) does not use up, as it used up 0.8 s once."""
    before = serving_threads()
    timeout = 3 * TIMEOUT
    with ActionServerSampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                             seed=1, timeout=timeout, device="cpu") as sampler:
        checks.sample_once(sampler, policy, before)
        slow_down(get_sampling_state=0.6 * timeout, get_actions=0.6 * timeout)
        batch = sample(sampler, policy)
        assert _state["slowed"] == ["get_sampling_state", "get_actions"], "the first pass moved no slot state"
        assert len(batch) >= 400 and sampler.n_restarts == 0


# ---------------------------------------------------------------------- a worker's own words
class ExplainingWorker(DefaultWorker):
    """A worker that reports a failure of its agent in words of its own (the original dropped, to keep
    its message short), as a user's worker may: the proxy's TimeoutError is then nowhere in what the
    sampler is told, neither the worker's error nor its traceback."""

    def update_agent(self, agent_update: Any) -> None:
        try:
            super().update_agent(agent_update)
        except Exception:
            raise RuntimeError(f"worker {self.worker_number} could not take its new agent") from None

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> Any:
        try:
            return super().rollout(min_steps=min_steps, n_episodes=n_episodes)
        except Exception:
            raise RuntimeError(f"worker {self.worker_number} could not finish its rollout") from None


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("method", "act", "who"), [("seed", sample_with_a_new_policy, r"worker \d"),
                                                    ("get_actions", sample, SOME)],
                         ids=["seed-in-its-agent-update", "get_actions-in-its-rollout"])
def test_a_worker_that_words_its_proxys_timeout_its_own_way_is_not_blamed(
        policy: BlockingPolicy, method: str, act: Callable[[Any, BlockingPolicy], Any], who: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The sampler tells that a worker's wait for the server ran out by the worker's slot (the proxy marks
    it when it gives up), not by the text of the error the worker reports: the server's call is named."""
    error, thread, took, sampler = hang(ActionServerSampler, policy, method, act, worker_class=ExplainingWorker)
    check_named_and_released(error, message("action_server", method, who, "sampling (obtain_samples)"), thread,
                             took, sampler, caplog)


# ---------------------------------------------------------------------- ServerBusy
def kill_worker_1(sampler: Any) -> None:
    """What the OOM killer does: worker 1 dies while the server's forward pass hangs."""
    pid = sampler.worker_pids[1]
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "who"), [(ActionServerSampler, SOME),
                                                    (AlternatingSampler, r"worker \d")],
                         ids=["action_server", "alternating"])
def test_restarting_a_worker_while_a_forward_pass_hangs_names_the_pass(
        policy: BlockingPolicy, sampler_class: type[ActionServerSampler], who: str, caplog: pytest.LogCaptureFixture) -> None:
    """Restarting worker 1 needs the server's lock, which the stuck pass holds: the wait is bounded
    (ServerBusy) and the line names the pass."""
    with caplog.at_level(logging.WARNING):
        error, thread, took, sampler = hang(sampler_class, policy, "get_actions", sample, "restart",
                                            during=kill_worker_1)
    restarting = [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]
    assert len(restarting) == 1 and restarting[0].startswith("worker 1 "), restarting
    check_named_and_released(error, message(sampler_class.option_name, "get_actions", who, "restarting worker 1"),
                             thread, took, sampler, caplog)


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_update_after_ctrl_c_left_a_pass_hanging_names_the_pass(policy: BlockingPolicy,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Ctrl-C abandons a call whose forward pass hangs; the next call's agent update waits for the
    server only ``timeout`` seconds (ServerBusy), and the line names the pass."""
    main = threading.main_thread().ident
    assert main is not None

    def interrupt_then_sample(sampler: Any, policy: BlockingPolicy) -> Any:
        with interruptible():  # SIGINT raises here even when the suite runs with SIGINT ignored
            with pytest.raises(KeyboardInterrupt):
                sampler.obtain_samples(1, 400, policy.get_param_values())
        return sampler.obtain_samples(2, 400, policy.get_param_values())

    error, thread, took, sampler = hang(AlternatingSampler, policy, "get_actions", interrupt_then_sample,
                                        during=lambda _: signal.pthread_kill(main, signal.SIGINT))
    check_named_and_released(error, message("alternating", "get_actions", r"worker \d", "sampling (obtain_samples)"),
                             thread, took, sampler, caplog)
