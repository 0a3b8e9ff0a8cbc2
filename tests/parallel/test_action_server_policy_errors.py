"""A call of the action server's policy that moves workers' slot state, or serves workers, and raises.

The server moves each worker's slot state (noise streams, recurrent state) in and out of the copy of
the policy that serves it: ``get_sampling_state`` takes the residents' rows out, ``set_sampling_state``
puts the next set's back, and a ``reset`` queued for a worker whose rows were out is applied once they
are back in. It does so within a forward pass, a worker's ``seed``, an agent update, and when a dead
worker is restarted (its rows go). When one of those calls of the policy raises, the policy is at
fault, not a worker: the sampler raises one line that names the sampler, the call, the workers whose
rows it moved, what it was made for, the error and what to fix, with the policy's traceback (as for an
agent update that raises), and restarts no worker. (It once raised the policy's bare ``RuntimeError``
from a restart, a traceback through corral's internals in ``train.py``; and from a forward pass each
waiting worker reported the server's traceback as its own failure, was restarted up to
``sampler.max_restarts`` times, and the last one was blamed.)

The same holds for the policy's calls made for the workers themselves: a forward pass's
``get_actions``, and the ``seed`` and ``reset`` a worker asks for (which once got that old treatment:
"worker 0 (pid ...) raised ActionServerError: the action server failed to serve worker 0: ...",
restarts, then one worker blamed); and for the control calls a worker makes of its agent that reach
the server's policy on its behalf: ``get_sampling_state`` (the sampler's ``state_dict``),
``get_param_values`` and ``set_param_values`` (a user's worker may ask for them), which kept that
old treatment longer.

Real worker processes (spawn), real CartPole (in which worker 1 kills itself, SIGKILL, at its 40th step
for the restart); the policy is an MLPPolicy whose chosen method raises when, and only when, the
chosen function of :class:`~corral.parallel.slot_state.AgentPool` calls it.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Iterator, Sequence

import numpy as np
import pytest

from corral import ActionServerSampler, AlternatingSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError
from corral.parallel.action_proxy import ActionServerError
from corral.parallel.slot_state import AgentPool
from corral.plugins.workers.default import DefaultWorker
from corral.testing.modules import import_path

TIMEOUT = 2.0
SUICIDE = "corral.testing.faulty_envs:corral/SuicideCartPole-v1"
#: ``tests/conf/action_server_checks.py`` (``tests`` is not an importable package).
checks = import_path(Path(__file__).resolve().parents[2] / "tests" / "conf" / "action_server_checks.py",
                     "action_server_checks")

#: The server runs a deep copy of the policy: what the test controls lives at module level.
#: ``once``: the method raises the first time only.
_fault: dict[str, Any] = {"method": None, "within": None, "direct": False, "raised": 0, "once": False}


def _within(code: CodeType, direct: bool) -> bool:
    """Whether the policy's method was called within ``code`` (``direct``: by ``code`` itself)."""
    frame: FrameType | None = sys._getframe(3)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = None if direct else frame.f_back
    return False


def _maybe_raise(method: str) -> None:
    if _fault["once"] and _fault["raised"]:
        return
    if _fault["method"] == method and _within(_fault["within"], _fault["direct"]):
        _fault["raised"] += 1
        raise RuntimeError(f"boom in {method}")


class RaisingPolicy(MLPPolicy):
    """An MLPPolicy whose ``_fault["method"]`` raises when :class:`AgentPool`'s ``_fault["within"]``
    calls it (at any other time it works)."""

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        _maybe_raise("get_actions")
        return super().get_actions(observations)

    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        _maybe_raise("seed")
        super().seed(seeds)

    def get_sampling_state(self) -> Any:
        _maybe_raise("get_sampling_state")
        return super().get_sampling_state()

    def set_sampling_state(self, state: Any) -> None:
        _maybe_raise("set_sampling_state")
        super().set_sampling_state(state)

    def reset(self, dones: np.ndarray | None = None) -> None:
        _maybe_raise("reset")
        super().reset(dones)

    def get_param_values(self) -> dict[str, np.ndarray]:
        _maybe_raise("get_param_values")
        return super().get_param_values()

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        _maybe_raise("set_param_values")
        super().set_param_values(params)


leaves_nothing_behind = checks.leaves_nothing_behind  # autouse: no process or segment outlives a test


@pytest.fixture
def policy() -> Iterator[RaisingPolicy]:
    _fault.update(method=None, within=None, direct=False, raised=0, once=False)
    yield RaisingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    _fault.update(method=None, within=None, direct=False, raised=0, once=False)


WHO = r"(worker \d|workers \[\d(, \d)*\])"
PURPOSE = {
    "get_sampling_state": "which the server calls to take workers' sampling state out of the policy",
    "set_sampling_state": "which the server calls to put workers' sampling state back into the policy",
    "reset": "which the server calls to start the new episodes of a worker whose state was out of the policy",
}
#: What the server calls the policy's methods for that a worker asks for (or a forward pass is).
SERVES = {
    "get_actions": "which the server calls for each forward pass of its workers",
    "seed": "which the server calls when a worker seeds its environments' rows (when it gets the agent)",
    "reset": "which the server calls when new episodes of a worker's environments start",
    "get_sampling_state": "which the server calls when a worker asks its agent for its sampling state "
                          "(to save it)",
    "get_param_values": "which the server calls when a worker asks its agent for its parameters",
    "set_param_values": "which the server calls when a worker sets its agent's parameters",
}


def message(sampler: str, method: str, made_for: str, activity: str, moves: bool = True) -> re.Pattern[str]:
    """The one line naming the server's call of the policy's ``method`` that raised (``moves``: one
    that moves slot state; else one made for the workers themselves)."""
    purpose = (PURPOSE if moves else SERVES)[method]
    return re.compile(
        rf"{sampler} sampler: the action server's call of the policy's {method} \(for {WHO}, on cpu{made_for}\) "
        rf"raised RuntimeError: boom in {method} while {re.escape(activity)}; the server's policy is at fault, "
        rf"not a worker, so none was restarted; fix the policy's {method}, {re.escape(purpose)}")


def run(sampler: ActionServerSampler, policy: RaisingPolicy, agent_update: Any = None) -> BaseException | None:
    """Sample with ``sampler`` (entered), then with ``agent_update`` when given: what it raised."""
    try:
        sampler.obtain_samples(0, 2000, policy.get_param_values())
        if agent_update is not None:
            sampler.obtain_samples(1, 2000, agent_update)
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
        return exc
    return None


def check_error(error: BaseException | None, pattern: re.Pattern[str], method: str, n_restarts: int,
                caplog: pytest.LogCaptureFixture, restarting: int) -> None:
    """``error`` is the one line of ``pattern`` with the policy's traceback; no worker was restarted
    (``n_restarts``: the sampler's count; ``restarting``: the "restarting it" warnings expected, of the
    worker that died)."""
    assert _fault["raised"] >= 1, f"the policy's {method} was never made to raise"
    assert isinstance(error, WorkerError), f"not a WorkerError naming the call: {error!r}"
    line = error.message
    assert pattern.fullmatch(line), line
    assert "\n" not in line and error.worker_number is None
    tb = error.remote_traceback or ""
    assert 'raise RuntimeError(f"boom in {method}")' in tb and tb.rstrip().endswith(f"RuntimeError: boom in {method}"), tb
    assert Path(__file__).name in (error.traceback_from_caller() or "")
    warnings = [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]
    assert len(warnings) == restarting, warnings
    assert n_restarts == 0
    failed = [r.getMessage() for r in caplog.records if "the action server failed" in r.getMessage()]
    assert failed == [], failed


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("sampler_class", [ActionServerSampler, AlternatingSampler],
                         ids=["action_server", "alternating"])
def test_a_raising_get_sampling_state_while_restarting_a_worker_is_one_line(
        policy: RaisingPolicy, sampler_class: type[ActionServerSampler], caplog: pytest.LogCaptureFixture) -> None:
    _fault.update(method="get_sampling_state", within=AgentPool.forget.__code__)
    env = EnvFactory(SUICIDE, {"fail_at": 40, "only_worker": 1})
    with caplog.at_level(logging.WARNING), \
            sampler_class(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=TIMEOUT,
                          device="cpu", on_worker_failure="restart") as sampler:
        error = run(sampler, policy)
    check_error(error, message(sampler_class.option_name, "get_sampling_state", "", "restarting worker 1"),
                "get_sampling_state", sampler.n_restarts, caplog, restarting=1)


FORWARD = "made for a forward pass of " + WHO
# (sampler, workers, method that raises, AgentPool's function that calls it, agent update, made for)
CASES = [
    (ActionServerSampler, 2, "get_sampling_state", AgentPool.get_actions, None, FORWARD),
    (AlternatingSampler, 4, "get_sampling_state", AgentPool.get_actions, None, FORWARD),
    (ActionServerSampler, 2, "set_sampling_state", AgentPool.get_actions, None, FORWARD),
    (AlternatingSampler, 4, "reset", AgentPool._resident, None, FORWARD),
    (ActionServerSampler, 2, "get_sampling_state", AgentPool._assign, "per-worker",
     "made for the policy's set_param_values for " + WHO),
]
IDS = ["action_server-forward-get", "alternating-forward-get", "action_server-forward-set",
       "alternating-forward-queued-reset", "action_server-agent-update"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "n_workers", "method", "within", "update", "made_for"), CASES, ids=IDS)
def test_a_raising_move_of_slot_state_is_the_policys_one_line_and_restarts_no_worker(
        policy: RaisingPolicy, sampler_class: type[ActionServerSampler], n_workers: int, method: str, within: Any,
        update: str | None, made_for: str, caplog: pytest.LogCaptureFixture) -> None:
    _fault.update(method=method, within=within.__code__)
    agent_update = [policy.get_param_values() for _ in range(n_workers)] if update == "per-worker" else None
    with caplog.at_level(logging.WARNING), \
            sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=n_workers,
                          seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure="restart") as sampler:
        error = run(sampler, policy, agent_update)
    check_error(error, message(sampler_class.option_name, method, ", " + made_for, "sampling (obtain_samples)"),
                method, sampler.n_restarts, caplog, restarting=0)


def start_error(policy: RaisingPolicy, caplog: pytest.LogCaptureFixture) -> BaseException | None:
    """Start (and shut down) a two-worker action server sampler over ``policy``; the error its start
    raised, if any, with its warnings in ``caplog``."""
    with caplog.at_level(logging.WARNING):
        try:
            ActionServerSampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                                seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure="restart").shutdown_worker()
        except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
            return exc
    return None


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_raising_move_of_slot_state_within_a_workers_seed_is_the_policys_one_line(
        policy: RaisingPolicy, caplog: pytest.LogCaptureFixture) -> None:
    """Each worker seeds its slots when it gets the agent (at the start): the server takes the rows of
    the worker resident before it out of the policy, and that ``get_sampling_state`` raises."""
    _fault.update(method="get_sampling_state", within=AgentPool.seed.__code__)
    error = start_error(policy, caplog)
    assert error is not None, "the sampler started although its policy's get_sampling_state raised"
    # the sampler that could not start restarted nothing (no "restarting it" warning either)
    check_error(error, message("action_server", "get_sampling_state", r", made for the policy's seed for worker \d",
                               "starting"), "get_sampling_state", 0, caplog, restarting=0)


# (sampler, workers, method that raises, AgentPool's function that calls it, made for)
OWN_CASES = [
    (ActionServerSampler, 2, "get_actions", AgentPool.get_actions, ""),
    (AlternatingSampler, 4, "get_actions", AgentPool.get_actions, ""),
    # a worker's own reset: asked for alone, or riding along with its forward pass
    (ActionServerSampler, 2, "reset", AgentPool.reset, "(, made for a forward pass of " + WHO + ")?"),
]
OWN_IDS = ["action_server-get_actions", "alternating-get_actions", "action_server-workers-reset"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "n_workers", "method", "within", "made_for"), OWN_CASES, ids=OWN_IDS)
def test_a_raising_forward_pass_or_workers_reset_is_the_policys_one_line_and_restarts_no_worker(
        policy: RaisingPolicy, sampler_class: type[ActionServerSampler], n_workers: int, method: str, within: Any,
        made_for: str, caplog: pytest.LogCaptureFixture) -> None:
    """The forward pass itself (or the reset of a worker's episodes) raises: every worker waiting for it
    is answered with the error, but the policy is named, at once, and no worker is restarted."""
    _fault.update(method=method, within=within.__code__)
    with caplog.at_level(logging.WARNING), \
            sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=n_workers,
                          seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure="restart") as sampler:
        error = run(sampler, policy)
    check_error(error, message(sampler_class.option_name, method, made_for, "sampling (obtain_samples)", moves=False),
                method, sampler.n_restarts, caplog, restarting=0)
    assert "ActionServerError" not in str(error), str(error)


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_raising_seed_a_worker_asks_for_is_the_policys_one_line(
        policy: RaisingPolicy, caplog: pytest.LogCaptureFixture) -> None:
    """Each worker seeds its slots when it gets the agent (at the start): the policy's seed raises."""
    _fault.update(method="seed", within=AgentPool.seed.__code__)
    error = start_error(policy, caplog)
    assert error is not None, "the sampler started although its policy's seed raised"
    check_error(error, message("action_server", "seed", "", "starting", moves=False), "seed", 0, caplog,
                restarting=0)


# ---------------------------------------------------------------------- a worker's own control calls
class AskingWorker(DefaultWorker):
    """A worker that asks its agent for its parameters before each rollout and sets them back, as a
    user's worker may (to check them for NaN, say): control calls the proxy forwards to the server's
    policy on this worker's behalf."""

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> Any:
        if self.agent is not None:
            self.agent.set_param_values(self.agent.get_param_values())
        return super().rollout(min_steps=min_steps, n_episodes=n_episodes)


def save_state(sampler: ActionServerSampler, policy: RaisingPolicy) -> BaseException | None:
    """Sample, then save the sampler's state (each worker asks its agent for its sampling state)."""
    try:
        sampler.obtain_samples(0, 400, policy.get_param_values())
        sampler.state_dict()
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
        return exc
    return None


def save_and_restore_state(sampler: ActionServerSampler, policy: RaisingPolicy) -> BaseException | None:
    """Sample, save the sampler's state and restore it (each worker sets its agent's sampling state)."""
    try:
        sampler.obtain_samples(0, 400, policy.get_param_values())
        sampler.load_state_dict(sampler.state_dict())
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
        return exc
    return None


def sample_once(sampler: ActionServerSampler, policy: RaisingPolicy) -> BaseException | None:
    return run(sampler, policy)


SAVING, RESTORING = "saving its sampling state (state_dict)", "restoring its sampling state (load_state_dict)"
# (sampler, the method that raises, AgentPool's function that calls it (itself: direct), the worker class,
# what the test does, the activity, what it was made for, whether it moves slot state)
WORKER_CALL_CASES = [
    (ActionServerSampler, "get_sampling_state", AgentPool.get_sampling_state, True, DefaultWorker, save_state,
     SAVING, "", False),
    (AlternatingSampler, "get_sampling_state", AgentPool.get_sampling_state, True, DefaultWorker, save_state,
     SAVING, "", False),
    (ActionServerSampler, "get_param_values", AgentPool.get_param_values, True, AskingWorker, sample_once,
     "sampling (obtain_samples)", "", False),
    (AlternatingSampler, "get_param_values", AgentPool.get_param_values, True, AskingWorker, sample_once,
     "sampling (obtain_samples)", "", False),
    (ActionServerSampler, "set_param_values", AgentPool.set_per_worker, False, AskingWorker, sample_once,
     "sampling (obtain_samples)", "", False),
    # a worker's set_sampling_state reaches the policy through the move of the rows resident before it
    (ActionServerSampler, "get_sampling_state", AgentPool.set_sampling_state, False, DefaultWorker,
     save_and_restore_state, RESTORING, r", made for the policy's set_sampling_state for worker \d", True),
]
WORKER_CALL_IDS = ["action_server-get_sampling_state", "alternating-get_sampling_state",
                   "action_server-get_param_values", "alternating-get_param_values",
                   "action_server-set_param_values", "action_server-set_sampling_state-move"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "method", "within", "direct", "worker_class", "act", "activity", "made_for",
                          "moves"), WORKER_CALL_CASES, ids=WORKER_CALL_IDS)
def test_a_raising_control_call_a_worker_asks_for_is_the_policys_one_line_and_restarts_no_worker(
        policy: RaisingPolicy, sampler_class: type[ActionServerSampler], method: str, within: Any, direct: bool,
        worker_class: type, act: Any, activity: str, made_for: str, moves: bool,
        caplog: pytest.LogCaptureFixture) -> None:
    """A worker's own ``get_sampling_state`` (the sampler's state_dict), ``get_param_values`` or
    ``set_param_values`` that raises in the server's policy: the policy is named, at once, and no worker is
    restarted (it was: "worker 0 (pid ...) raised ActionServerError: the action server failed to serve
    worker 0: ...", then restarts that failed alike, then that worker blamed)."""
    _fault.update(method=method, within=within.__code__, direct=direct)
    with caplog.at_level(logging.WARNING), \
            sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                          seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure="restart",
                          worker_class=worker_class) as sampler:
        error = act(sampler, policy)
    check_error(error, message(sampler_class.option_name, method, made_for, activity, moves=moves), method,
                sampler.n_restarts, caplog, restarting=0)
    assert "ActionServerError" not in str(error), str(error)


# ---------------------------------------------------------------------- a worker that goes on after the error
OWN_FAILURE = "the worker's own failure, after it went on"


class ForgivingWorker(DefaultWorker):
    """A worker that asks its agent for its parameters before each rollout, catches the server's error
    when that call of the policy raises, samples on (answered by the server's forward passes), and
    then fails for a reason of its own (once: a worker started afresh caught nothing)."""

    caught = False

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> Any:
        if self.agent is not None:
            try:
                self.agent.get_param_values()
            except ActionServerError:
                self.caught = True
        batch = super().rollout(min_steps=min_steps, n_episodes=n_episodes)
        if self.caught:
            self.caught = False
            raise RuntimeError(OWN_FAILURE)
        return batch


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("sampler_class", [ActionServerSampler, AlternatingSampler],
                         ids=["action_server", "alternating"])
@pytest.mark.parametrize("on_worker_failure", ["restart", "raise"])
def test_a_worker_that_caught_the_policys_error_and_went_on_is_blamed_for_its_own_later_failure(
        policy: RaisingPolicy, sampler_class: type[ActionServerSampler], on_worker_failure: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The server's record of the policy's call that raised while a worker waited for it belongs to that
    request only: a worker that caught the error, went on and later raised an error of its own is
    restarted (``on_worker_failure=restart``) or named with its own error (``raise``). It was the
    policy's one line ("... get_param_values ... raised RuntimeError: boom in get_param_values ...;
    the server's policy is at fault, not a worker, so none was restarted"), the record kept until the
    worker was restarted."""
    _fault.update(method="get_param_values", within=AgentPool.get_param_values.__code__, direct=True, once=True)
    with caplog.at_level(logging.WARNING), \
            sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                          seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure=on_worker_failure,
                          worker_class=ForgivingWorker) as sampler:
        error = run(sampler, policy)
        n_restarts = sampler.n_restarts
    assert _fault["raised"] == 1, "the policy's get_param_values was not made to raise (once)"
    warnings = [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]
    if on_worker_failure == "restart":
        assert error is None, f"the worker's own failure was not the worker's: {error!r}"
        assert n_restarts == 1 and len(warnings) == 1, (n_restarts, warnings)
        assert OWN_FAILURE in warnings[0] and "boom" not in warnings[0], warnings[0]
    else:
        assert isinstance(error, WorkerError), f"not the worker's WorkerError: {error!r}"
        assert error.worker_number in (0, 1), error.message
        assert f"RuntimeError: {OWN_FAILURE}" in error.message and "policy" not in error.message, error.message
        assert n_restarts == 0 and warnings == [], warnings
