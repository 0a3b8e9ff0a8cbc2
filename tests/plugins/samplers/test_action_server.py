"""sampler=action_server: same episodes as local, workers unchanged under the proxy, faults, clean shutdown.

Real worker processes (spawn), real CartPole, corral's MLPPolicy served from this process. Every
wait is bounded; an autouse fixture checks that each test leaves no child process, no
shared-memory segment of ours and no semaphore behind.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_multiprocessing import (  # shared helpers (tests/ is not a package)
    CARTPOLE,
    SHM,
    KillSelfCartPole,
    SlowCartPole,
    assert_same,
    biased_params,
    check_abandoned_call,
    check_all_workers_dead,
    check_ctrl_c,
    check_same_as_local,
    check_sigkill_raises,
    check_sigkill_restart,
    check_train_py_runs,
    make_cartpole,
    our_segments,
)

from corral import (
    ActionServerSampler,
    ConfigError,
    DefaultWorker,
    EnvFactory,
    EnvSpec,
    FragmentWorker,
    LocalSampler,
    MLPPolicy,
    VecWorker,
    WorkerError,
    WorkerFactory,
)
from corral.framework.policy import Policy
from corral.parallel.action_proxy import ActionProxy
from corral.parallel.action_server import ActionServer
from corral.plugins.samplers.action_server import corral_validate_config, server_policy
from corral.rl.noise import NoiseStreams
from corral.testing import WorkerContract
from corral.testing.contracts import make_test_policy

SUICIDE = "corral.testing.faulty_envs:corral/SuicideCartPole-v1"
RAISING = "corral.testing.faulty_envs:corral/RaisingCartPole-v1"


# ---------------------------------------------------------------------- helpers
def semaphores() -> set[str]:
    """Named POSIX semaphores of multiprocessing (``/dev/shm/sem.mp-*``)."""
    return {p.name for p in SHM.glob("sem.mp-*")} if SHM.is_dir() else set()


@pytest.fixture(autouse=True)
def leaves_nothing_behind() -> Iterator[None]:
    """No worker process, segment or semaphore of ours may outlive a test."""
    before = semaphores()
    yield
    deadline = time.monotonic() + 10
    while (multiprocessing.active_children() or our_segments() or semaphores() - before) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []
    assert our_segments() == set()
    assert semaphores() - before == set(), "semaphores were not freed"


@pytest.fixture(scope="module")
def policy() -> MLPPolicy:
    return MLPPolicy(EnvSpec.from_env(CARTPOLE()))


def options(seed: int = 1, worker: type = DefaultWorker, n_workers: int = 2, **kwargs: Any) -> dict[str, Any]:
    worker_args = dict(n_envs=3) if worker is VecWorker else {}
    if worker is FragmentWorker:
        worker_args = dict(n_envs=2, timesteps_per_call=20)
    return dict(max_episode_length=500, n_workers=n_workers, seed=seed, worker_class=worker,
                worker_args=worker_args, **kwargs)


def sampler_options(**kwargs: Any) -> dict[str, Any]:
    return dict(device="cpu", timeout=60.0, **kwargs)


class RecurrentCounter(Policy):
    """A recurrent policy with per-slot hidden state (a running sum of observations), reset per slot
    by ``reset(dones)``, and per-slot noise: its actions depend on every step since the slot's
    episode began, so any mix-up of slots, resets or state swaps changes the episodes."""

    recurrent = True

    def __init__(self) -> None:
        self.hidden = np.zeros((0, 4))
        self.streams = NoiseStreams([])
        self.deterministic = False

    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        self.streams = NoiseStreams(seeds)
        self.hidden = np.zeros((len(seeds), 4))

    def reset(self, dones: np.ndarray | None = None) -> None:
        mask = slice(None) if dones is None else np.asarray(dones, dtype=bool)
        self.hidden[mask] = 0.0
        self.streams.reset(dones)

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        self.hidden = 0.9 * self.hidden + observations
        u = self.streams.uniform(1)[:, 0]
        self.streams.advance()
        actions = ((self.hidden[:, 2] + 0.05 * (u - 0.5)) > 0).astype(np.int64)
        return actions, {"h": self.hidden[:, 2].astype(np.float32).copy()}

    def get_param_values(self) -> dict[str, np.ndarray]:
        return {}

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        pass

    def get_sampling_state(self) -> dict[str, Any]:
        return {"hidden": self.hidden.copy(), "streams": self.streams.state_dict()}

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        self.hidden = np.array(state["hidden"])
        self.streams.load_state_dict(state["streams"])


class NeedsPosterior(DefaultWorker):
    """A worker whose agent must offer more than the proxy does (like PEARL's)."""

    agent_methods = frozenset({"get_actions", "reset", "infer_posterior"})


# ---------------------------------------------------------------------- same seed, same episodes
@pytest.mark.parametrize("worker", [DefaultWorker, VecWorker], ids=["default", "vec"])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_episodes_as_local_and_exact_state_round_trip(policy: MLPPolicy, seed: int, worker: type) -> None:
    params = policy.get_param_values()
    with ActionServerSampler(policy, CARTPOLE, **options(seed, worker), **sampler_options()) as srv, \
            LocalSampler(policy, CARTPOLE, **options(seed, worker)) as local:
        check_same_as_local(srv, local, params)
        assert srv.server is not None and srv.server.n_served_steps > 0


def test_workers_that_sleep_at_once_give_the_same_episodes(policy: MLPPolicy) -> None:
    """``spin_us=0``: workers and server sleep on their semaphores without polling first."""
    params = policy.get_param_values()
    with ActionServerSampler(policy, CARTPOLE, **options(3, VecWorker), **sampler_options(spin_us=0)) as srv, \
            LocalSampler(policy, CARTPOLE, **options(3, VecWorker)) as local:
        assert srv.server is not None and srv.server.spin_s == 0.0
        check_same_as_local(srv, local, params)


def test_one_forward_pass_serves_every_worker(policy: MLPPolicy) -> None:
    """Vec workers in lock-step: one batched forward per vector step, not one per worker."""
    opts = options(3, VecWorker)
    with ActionServerSampler(policy, CARTPOLE, **opts, **sampler_options()) as srv:
        assert srv.server is not None
        before = srv.server.n_served_steps
        batch = srv.obtain_exact_episodes(3, biased_params(policy, 0))  # short, equal episodes
        served = srv.server.n_served_steps - before
    # Each worker takes as many vector steps as its longest episode; batched, the server needs
    # only as many forward passes as the longer of the two (one per worker without batching).
    per_worker = [int(batch.lengths[:3].max()), int(batch.lengths[3:].max())]
    assert served <= max(per_worker) + 1 < sum(per_worker), (served, per_worker)


def test_fragment_worker_runs_and_matches_local(policy: MLPPolicy) -> None:
    params = policy.get_param_values()
    opts = options(4, FragmentWorker)
    with ActionServerSampler(policy, CARTPOLE, **opts, **sampler_options()) as srv, \
            LocalSampler(policy, CARTPOLE, **opts) as local:
        for itr in range(3):  # fragments continue across calls
            got = srv.obtain_samples(itr, 100, params)
            assert len(got) == 2 * 2 * 20 * 2  # 2 workers x 2 envs x 20 steps x 2 rollouts
            assert_same(got, local.obtain_samples(itr, 100, params))


@pytest.mark.parametrize("worker", [DefaultWorker, VecWorker], ids=["default", "vec"])
def test_recurrent_policy_keeps_per_slot_state(worker: type) -> None:
    """Per-slot hidden state and resets survive batching, workers finishing early and state swaps."""
    agent = RecurrentCounter()
    with ActionServerSampler(agent, CARTPOLE, **options(5, worker, n_workers=3), **sampler_options()) as srv, \
            LocalSampler(agent, CARTPOLE, **options(5, worker, n_workers=3)) as local:
        for itr in range(2):
            assert_same(srv.obtain_samples(itr, 600, None), local.obtain_samples(itr, 600, None))
        assert_same(srv.obtain_exact_episodes(2, None), local.obtain_exact_episodes(2, None))
        # Per-worker agents: each worker of the list on its own server instance.
        agents = [RecurrentCounter(), agent, RecurrentCounter()]
        assert_same(srv.obtain_exact_episodes(2, agents), local.obtain_exact_episodes(2, agents))


def test_per_worker_parameters_and_broadcast_again(policy: MLPPolicy) -> None:
    agents = [biased_params(policy, 0), biased_params(policy, 1)]
    with ActionServerSampler(policy, CARTPOLE, **options(6, VecWorker), **sampler_options()) as srv:
        batch = srv.obtain_exact_episodes(2, agents)
        first, second = batch.split()[:2], batch.split()[2:]
        assert all((ep.actions == 0).all() for ep in first) and all((ep.actions == 1).all() for ep in second)
        assert (srv.obtain_exact_episodes(1, agents[1]).actions == 1).all()
        with pytest.raises(ConfigError, match="exactly one item per worker"):
            srv.obtain_samples(0, 10, [agents[0]])


# ---------------------------------------------------------------------- the proxy runs workers unchanged
class _ServedWorkers:
    """Workers built in this process whose agents are proxies of in-process action servers."""

    def __init__(self) -> None:
        self.servers: list[ActionServer] = []

    def serve(self, worker: Any, policy: Policy) -> None:
        server = ActionServer(multiprocessing.get_context("spawn"), 1, [[0]], lambda p: server_policy(p, "cpu"),
                              lambda i: True, obs_bytes=1 << 20, resp_bytes=1 << 20, timeout=30.0)
        self.servers.append(server)
        server.start()
        server.apply_agent_update(policy, 1)
        worker.update_agent(ActionProxy(0, endpoint=server.endpoint(0)))

    def close(self) -> None:
        for server in self.servers:
            server.close()


class _ProxyWorkerContract(WorkerContract):
    """The worker contract, with each worker's agent an action-server proxy."""

    @pytest.fixture(autouse=True)
    def _servers(self) -> Iterator[None]:
        self._served = _ServedWorkers()
        yield
        for worker in self._workers:
            worker.agent = None  # the proxies hold their servers' semaphores
        self._served.close()
        self._served.servers.clear()

    def make_worker(self, *, seed: int, max_episode_length: int | None, env: Any, policy: Policy) -> Any:
        factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length, n_workers=1,
                                worker_class=self.resolved_worker_class(), worker_args=dict(self.worker_args))
        worker = factory(0)
        self._workers.append(worker)
        worker.update_env(env)
        self._served.serve(worker, copy.deepcopy(policy))
        assert isinstance(worker.agent, ActionProxy)
        return worker


class TestDefaultWorkerUnderProxy(_ProxyWorkerContract):
    """``worker=default`` with a proxy agent."""

    worker_class = "default"


class TestVecWorkerUnderProxy(_ProxyWorkerContract):
    """``worker=vec`` with a proxy agent."""

    worker_class = "vec"
    worker_args = {"n_envs": 3}


class TestFragmentWorkerUnderProxy(_ProxyWorkerContract):
    """``worker=fragment`` with a proxy agent: fragments continue across rollouts."""

    worker_class = "fragment"
    worker_args = {"n_envs": 2, "timesteps_per_call": 16}


def test_a_worker_needing_more_than_the_proxy_is_refused(policy: MLPPolicy) -> None:
    with pytest.raises(ConfigError, match="infer_posterior.*sampler=multiprocessing"):
        ActionServerSampler(policy, CARTPOLE, **options(worker=NeedsPosterior), **sampler_options())
    cfg = OmegaConf.create({"sampler": {"name": "action_server"}, "worker": {"name": "vec"}})
    corral_validate_config(cfg)  # the built-in workers are fine
    proxy = ActionProxy(0)
    with pytest.raises(AttributeError, match="infer_posterior"):
        proxy.infer_posterior  # noqa: B018


def test_invalid_options_fail_clearly(policy: MLPPolicy) -> None:
    with pytest.raises(ConfigError, match="sampler.device"):
        ActionServerSampler(policy, CARTPOLE, **options(), device="tpu")
    with pytest.raises(ConfigError, match="sampler.device must be"):
        ActionServerSampler(policy, CARTPOLE, **options(), device="cudax")
    if torch.cuda.is_available():  # one index past the last GPU
        with pytest.raises(ConfigError, match="GPU\\(s\\): use cuda:0"):
            ActionServerSampler(policy, CARTPOLE, **options(), device=f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(ConfigError, match="no GPU"):
            ActionServerSampler(policy, CARTPOLE, **options(), device="cuda")
    with pytest.raises(ConfigError, match="slot_mib"):
        ActionServerSampler(policy, CARTPOLE, **options(), slot_mib=0)
    with pytest.raises(ConfigError, match="spin_us"):
        ActionServerSampler(policy, CARTPOLE, **options(), spin_us=-1)
    with pytest.raises(ConfigError, match="on_worker_failure"):
        ActionServerSampler(policy, CARTPOLE, **options(), **sampler_options(on_worker_failure="ignore"))


# ---------------------------------------------------------------------- faults
def test_sigkill_mid_sample_raises_naming_the_worker(policy: MLPPolicy, tmp_path: Path) -> None:
    envs = [CARTPOLE, make_cartpole(KillSelfCartPole, marker=str(tmp_path / "killed"))]
    check_sigkill_raises(ActionServerSampler(policy, envs, **options(), **sampler_options()), policy)


@pytest.mark.parametrize("worker", [DefaultWorker, VecWorker], ids=["default", "vec"])
def test_sigkill_with_restart_completes_the_call(policy: MLPPolicy, worker: type, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    envs = [CARTPOLE, make_cartpole(KillSelfCartPole, marker=str(tmp_path / "killed"))]
    check_sigkill_restart(ActionServerSampler(policy, envs, **options(worker=worker),
                                              **sampler_options(on_worker_failure="restart")), policy, caplog)


def test_env_raising_in_step_carries_its_traceback(policy: MLPPolicy) -> None:
    env = EnvFactory(RAISING, {"fail_at": 5, "only_worker": 1})
    with ActionServerSampler(policy, env, **options(), **sampler_options()) as srv:
        with pytest.raises(WorkerError) as info:
            srv.obtain_samples(0, 1000, policy.get_param_values())
    err = info.value
    assert err.worker_number == 1 and "EnvironmentFailure" in str(err)
    assert "faulty_envs.py" in (err.remote_traceback or "")


def test_a_failing_policy_is_reported_with_the_servers_traceback() -> None:
    class Broken(RecurrentCounter):
        def get_actions(self, observations: np.ndarray) -> Any:
            raise FloatingPointError("the forward pass blew up")

    # The policy, not a worker, is named, in one line (no worker's "raised ActionServerError"); the
    # server's traceback of the forward pass travels with it.
    with ActionServerSampler(Broken(), CARTPOLE, **options(), **sampler_options()) as srv:
        with pytest.raises(WorkerError) as info:
            srv.obtain_samples(0, 100, None)
    error = info.value
    line = error.message
    assert "\n" not in line and error.worker_number is None, line
    assert line.startswith("action_server sampler: the action server's call of the policy's get_actions (for "), line
    assert "raised FloatingPointError: the forward pass blew up" in line, line
    assert "the server's policy is at fault, not a worker, so none was restarted" in line, line
    assert "ActionServerError" not in str(error), str(error)
    tb = error.remote_traceback or ""
    assert 'raise FloatingPointError("the forward pass blew up")' in tb, tb
    assert "the forward pass blew up" in str(error)
    assert srv.n_restarts == 0


def test_all_workers_dead_is_an_error(policy: MLPPolicy) -> None:
    check_all_workers_dead(ActionServerSampler(policy, CARTPOLE, **options(), **sampler_options()))


def test_an_abandoned_call_never_mixes_into_a_later_batch(policy: MLPPolicy) -> None:
    slow = make_cartpole(SlowCartPole, delay=0.001)
    check_abandoned_call(ActionServerSampler(policy, slow, **options(3), **sampler_options()), policy)


# ---------------------------------------------------------------------- cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_server_gives_the_cpu_servers_discrete_actions() -> None:
    policy = make_test_policy(EnvSpec.from_env(CARTPOLE()))
    params = policy.get_param_values()
    with ActionServerSampler(policy, CARTPOLE, **options(1, VecWorker), device="cuda", timeout=60.0) as gpu, \
            LocalSampler(policy, CARTPOLE, **options(1, VecWorker)) as local:
        got, want = gpu.obtain_exact_episodes(2, params), local.obtain_exact_episodes(2, params)
    assert np.mean(got.actions[: len(want.actions)] == want.actions[: len(got.actions)]) > 0.99


def test_the_log_says_where_the_policy_runs(policy: MLPPolicy, caplog: pytest.LogCaptureFixture) -> None:
    # device=auto picks cuda whenever torch sees a GPU: the user reads which one it was.
    want = "cuda" if torch.cuda.is_available() else "cpu"
    with caplog.at_level("INFO", logger="corral.plugins.samplers.action_server"):
        with ActionServerSampler(policy, CARTPOLE, **options(), device="auto", timeout=60.0) as sampler:
            sampler.obtain_exact_episodes(1, policy.get_param_values())
    lines = [r.getMessage() for r in caplog.records if "the policy runs on" in r.getMessage()]
    assert lines and lines[0].startswith(f"action_server sampler: the policy runs on {want}"), lines
    assert lines[0].endswith("(sampler.device=auto)"), lines


# ---------------------------------------------------------------------- train.py end to end
def test_train_py_runs_end_to_end(tmp_path: Path) -> None:
    check_train_py_runs("action_server", tmp_path)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ctrl_c_exits_130_and_leaves_nothing_behind(tmp_path: Path) -> None:
    check_ctrl_c("action_server", tmp_path)
