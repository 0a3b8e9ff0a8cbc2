"""VectorWorker (``worker=vector``): one gymnasium VectorEnv per worker, every backend and autoreset mode."""

from __future__ import annotations

import copy
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError
from corral.framework.worker import WorkerFactory
from corral.plugins.workers import vector as vector_module
from corral.plugins.workers.vec import VecWorker
from corral.plugins.workers.vector import VectorWorker, VectorWorkerConfig
from corral.testing import WorkerContract
from corral.testing.contracts.helpers import env_spec_of, make_test_policy

CARTPOLE = "CartPole-v1"


def has_envpool() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:
        return False
    return True


needs_envpool = pytest.mark.skipif(not has_envpool(), reason="needs EnvPool (pip install 'corral[envpool]')")


def make_worker(env: Any = CARTPOLE, *, seed: int = 3, max_episode_length: int | None = None, policy: Any = None,
                **args: Any) -> VectorWorker:
    source = EnvFactory(env) if isinstance(env, str) else env
    worker = WorkerFactory(seed=seed, max_episode_length=max_episode_length, worker_class=VectorWorker,
                           worker_args=args)(0)
    worker.update_env(source)
    worker.update_agent(copy.deepcopy(policy) if policy is not None else make_test_policy(env_spec_of(source)))
    return worker


def replay_cartpole(batch: EpisodeBatch, atol: float = 1e-5, max_episode_length: int | None = None) -> None:
    """Every episode re-simulated from its first observation with gymnasium's CartPole and its actions:
    the recorded observations, rewards, step types and last observations are what CartPole gives (so no
    reset observation is recorded as a transition and a cut episode keeps its true last observation)."""
    env = gym.make(CARTPOLE).unwrapped
    start = 0
    for length in batch.lengths.tolist():
        obs = batch.observations[start:start + length]
        env.reset(seed=0)
        env.state = obs[0].astype(np.float64)
        for i in range(length):
            np.testing.assert_allclose(obs[i], np.asarray(env.state, dtype=np.float32), atol=atol)
            o, r, terminated, _, _ = env.step(int(batch.actions[start + i]))
            assert batch.rewards[start + i] == r
            last = i == length - 1
            if not last:
                assert not terminated, "an episode goes on after CartPole terminated it"
        np.testing.assert_allclose(batch.last_observations[len(np.flatnonzero(np.cumsum(batch.lengths) <= start))],
                                   o, atol=atol)
        expected = StepType.TERMINAL if terminated else StepType.TIMEOUT
        got = batch.step_types[start + length - 1]
        # At a cut that is also a fall, EnvPool reports the truncation only.
        assert got == expected or (got == StepType.TIMEOUT and length == max_episode_length)
        assert batch.step_types[start] == StepType.FIRST
        start += length


# ------------------------------------------------------------------------------------------- contracts
class TestNativeContract(WorkerContract):
    """``worker=vector`` over CartPole-v1's own vector entry point."""

    worker_class = "vector"
    worker_args = {"n_envs": 4, "backend": "native"}

    def test_shutdown_closes_environments(self) -> None:
        """The native backend needs an id (a tracked environment factory is not one): shutdown closes the VectorEnv."""
        worker = self.worker()
        worker.rollout()
        venv = worker.venv
        assert venv is not None
        closed = []
        close = venv.close
        venv.close = lambda **kw: (closed.append(True), close(**kw))  # type: ignore[method-assign]
        worker.shutdown()
        assert closed and worker.venv is None


class TestSyncContract(WorkerContract):
    """``worker=vector`` over gymnasium's SyncVectorEnv (NEXT_STEP autoreset)."""

    worker_class = "vector"
    worker_args = {"n_envs": 3, "backend": "sync"}


class TestSyncSameStepContract(TestSyncContract):
    """SyncVectorEnv with SAME_STEP autoreset (final observations come from the step's info)."""

    worker_args = {"n_envs": 3, "backend": "sync", "autoreset_mode": "same_step"}


class TestSyncDisabledContract(TestSyncContract):
    """SyncVectorEnv without autoreset: the worker resets ended slots with ``reset_mask``."""

    worker_args = {"n_envs": 3, "backend": "sync", "autoreset_mode": "disabled"}


class FragmentVectorWorker(VectorWorker):
    """The vector worker in fragment mode, as the contract sees it (``returns_fragments`` on the class)."""

    returns_fragments = True

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timesteps_per_call", 16)
        super().__init__(**kwargs)


class TestNativeFragmentContract(TestNativeContract):
    """``worker.timesteps_per_call > 0``: fragments that continue across rollouts."""

    worker_class = FragmentVectorWorker
    worker_args = {"n_envs": 3, "backend": "native", "timesteps_per_call": 16}


class TestSyncFragmentContract(WorkerContract):
    """Fragment mode over SyncVectorEnv (its running episodes are pickled into snapshots)."""

    worker_class = FragmentVectorWorker
    worker_args = {"n_envs": 3, "backend": "sync", "timesteps_per_call": 16}


@needs_envpool
class TestEnvPoolContract(WorkerContract):
    """``worker=vector`` over EnvPool's CartPole-v1."""

    worker_class = "vector"
    worker_args = {"n_envs": 4, "backend": "envpool", "num_threads": 1}

    def test_state_dict_round_trip(self) -> None:
        """EnvPool's state cannot be saved: a restored worker starts fresh episodes from a seed derived from
        the saved position, the same ones every time, and the log says so."""
        worker = self.worker()
        self.sample(worker)
        state = copy.deepcopy(worker.state_dict())
        assert state["restorable"] is False
        vector_module._warned_fresh_resume.discard("envpool")
        a, b = self.worker(), self.worker()
        a.load_state_dict(copy.deepcopy(state))
        b.load_state_dict(copy.deepcopy(state))
        assert self.sample(a).differences(self.sample(b)) == []

    def test_shutdown_closes_environments(self) -> None:
        """EnvPool needs an id: shutdown closes the pool."""
        worker = self.worker()
        worker.rollout()
        worker.shutdown()
        assert worker.venv is None


# ---------------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("args", [
    {"backend": "native"},
    {"backend": "sync"},
    {"backend": "sync", "autoreset_mode": "same_step"},
    {"backend": "sync", "autoreset_mode": "disabled"},
    pytest.param({"backend": "envpool", "num_threads": 1}, marks=needs_envpool),
], ids=["native", "sync", "sync-same_step", "sync-disabled", "envpool"])
@pytest.mark.parametrize("max_episode_length", [None, 9])
def test_episodes_are_what_cartpole_gives(args: dict[str, Any], max_episode_length: int | None) -> None:
    """Re-simulating every episode step by step reproduces it: reset observations are never transitions,
    TERMINAL and TIMEOUT are apart, and a cut episode keeps its true last observation."""
    worker = make_worker(n_envs=8, max_episode_length=max_episode_length, **args)
    for _ in range(2):
        batch = worker.rollout(min_steps=300)
        assert len(batch) >= 300 and batch.complete.all()
        if max_episode_length is not None:
            assert batch.lengths.max() <= max_episode_length
            assert (batch.step_types[np.cumsum(batch.lengths) - 1] == StepType.TIMEOUT).any()
        replay_cartpole(batch, max_episode_length=max_episode_length)
    worker.shutdown()


def test_fragments_are_what_cartpole_gives() -> None:
    """Fragments joined back into episodes replay like whole episodes; prior lengths and returns add up."""
    worker = make_worker(n_envs=4, max_episode_length=30, timesteps_per_call=7)
    pieces = [worker.rollout() for _ in range(12)]
    running: dict[int, list[Any]] = {}
    whole: list[EpisodeBatch] = []
    for batch in pieces:
        assert 4 * 7 <= len(batch) < 4 * 7 + 4  # at least n_envs * timesteps_per_call transitions, one vector step more at most
        for ep in batch.split():
            prior = int(ep.episode_infos["prior_length"][0])
            key = prior  # pieces of one slot's episode follow each other; match on the running length
            if prior == 0:
                assert ep.step_types[0] == StepType.FIRST
                chain = [ep]
            else:
                assert len(ep) == 1 or ep.step_types[0] == StepType.MID
                matches = [c for c in running.values() if sum(len(p) for p in c) == key
                           and np.allclose(c[-1].last_observations[0], ep.observations[0])]
                assert len(matches) == 1
                chain = matches[0] + [ep]
                assert np.isclose(float(ep.episode_infos["prior_return"][0]), sum(float(p.rewards.sum()) for p in chain[:-1]))
                running = {k: v for k, v in running.items() if v is not matches[0]}
            if ep.complete.all():
                whole.append(EpisodeBatch.concatenate(*chain).merge_fragments() if hasattr(EpisodeBatch, "merge_fragments") else _join(chain))
            else:
                running[id(chain[-1])] = chain
    assert whole
    replay_cartpole(EpisodeBatch.concatenate(*whole))


def _join(chain: list[EpisodeBatch]) -> EpisodeBatch:
    """Fragments of one episode as one whole episode."""
    step_types = np.concatenate([c.step_types for c in chain])
    step_types[0] = StepType.FIRST
    step_types[1:-1][step_types[1:-1] == StepType.FIRST] = StepType.MID
    return EpisodeBatch(
        observations=np.concatenate([c.observations for c in chain]),
        actions=np.concatenate([c.actions for c in chain]),
        rewards=np.concatenate([c.rewards for c in chain]),
        step_types=step_types,
        lengths=np.array([sum(len(c) for c in chain)]),
        last_observations=chain[-1].last_observations,
        agent_infos={k: np.concatenate([c.agent_infos[k] for c in chain]) for k in chain[0].agent_infos},
        episode_infos={},
    )


def test_same_step_and_disabled_autoreset_give_the_same_episodes() -> None:
    """SyncVectorEnv with per-slot seeds: SAME_STEP and DISABLED autoreset restart a slot in the step its
    episode ends and give the same episodes; NEXT_STEP restarts it a step later (the reset step is no
    transition), so its episodes start at other rows, and draw other action noise, but begin in the same
    states."""
    batches = {}
    for mode in ("next_step", "same_step", "disabled"):
        worker = make_worker(n_envs=5, backend="sync", autoreset_mode=mode)
        batches[mode] = [worker.rollout(min_steps=200), worker.rollout(n_episodes=7)]
        worker.shutdown()
    for got, want in zip(batches["disabled"], batches["same_step"]):
        assert got.differences(want) == []
    first = {mode: {tuple(b.observations[s]) for b in batches[mode] for s in np.cumsum(b.lengths) - b.lengths}
             for mode in batches}
    assert first["next_step"] & first["same_step"]


def test_sync_same_step_rollout_equals_the_vec_worker() -> None:
    """With SAME_STEP autoreset and the same per-slot seeds, the first rollout is worker=vec's episode for
    episode (slots restart in the step their episode ends, as vec restarts them)."""
    policy = make_test_policy(env_spec_of(EnvFactory(CARTPOLE)))
    vector = make_worker(n_envs=4, backend="sync", autoreset_mode="same_step", policy=policy, max_episode_length=60)
    vec = WorkerFactory(seed=3, max_episode_length=60, worker_class=VecWorker, worker_args={"n_envs": 4})(0)
    vec.update_env(EnvFactory(CARTPOLE))
    vec.update_agent(copy.deepcopy(policy))
    assert vector.rollout(min_steps=250).differences(vec.rollout(min_steps=250)) == []


def test_n_episodes_fewer_than_slots() -> None:
    worker = make_worker(n_envs=8)
    batch = worker.rollout(n_episodes=3)
    assert batch.n_episodes == 3 and batch.complete.all()
    assert worker.rollout().n_episodes == 8


def test_pendulum_box_actions_sync() -> None:
    """Box actions (clipped to the bounds), TIMEOUT at Pendulum's own 200-step limit."""
    worker = make_worker("Pendulum-v1", n_envs=4, backend="sync")
    batch = worker.rollout()
    assert batch.n_episodes == 4 and (batch.lengths == 200).all()
    assert (batch.step_types[np.cumsum(batch.lengths) - 1] == StepType.TIMEOUT).all()
    assert batch.actions.shape == (800, 1) and batch.actions.dtype == np.float32


@needs_envpool
@pytest.mark.parametrize("env_id,obs_dim,act_dim,limit", [("Pendulum-v1", 3, 1, 200), ("HalfCheetah-v5", 17, 6, 1000)])
def test_envpool_box_environments(env_id: str, obs_dim: int, act_dim: int, limit: int) -> None:
    """Continuous control through EnvPool: Pendulum and MuJoCo HalfCheetah, cut at max_episode_length."""
    worker = make_worker(env_id, n_envs=2, backend="envpool", num_threads=1, max_episode_length=50)
    batch = worker.rollout(min_steps=150)
    assert batch.observations.shape[1:] == (obs_dim,) and batch.actions.shape[1:] == (act_dim,)
    assert (batch.lengths == 50).all()
    assert (batch.step_types[np.cumsum(batch.lengths) - 1] == StepType.TIMEOUT).all()
    assert np.isfinite(batch.rewards).all()
    assert worker.episode_limit == 50 and limit > 50


def test_recording_with_a_backend_that_makes_every_environment_at_once_is_one_line(tmp_path: Any) -> None:
    """``corral eval --video`` on a native or EnvPool run: the recorder wraps one environment at a time,
    which these backends never make; the line says to record with worker.backend=sync."""
    from corral.framework.vector_env import build_vector_env
    from corral.framework.video import RecordedEnvFactory

    recorded = RecordedEnvFactory(EnvFactory("CartPole-v1"), {}, video_folder=str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        build_vector_env(recorded, backend="native", n_envs=2, max_episode_length=None, seed=1)
    assert str(raised.value).startswith("worker.backend=native makes all its environments inside one VectorEnv, so "
                                        "corral cannot record them one by one; record with worker.backend=sync")
    built = build_vector_env(recorded, backend="sync", n_envs=2, max_episode_length=None, seed=1)
    built.venv.close()


def test_an_async_vector_env_checks_the_memory_left_before_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Library use, or a worker built after others took the memory: ``build_vector_env`` itself
    refuses, before any process starts, the async environments that memory cannot hold."""
    import multiprocessing

    from corral.framework import memory
    from corral.framework.vector_env import ASYNC_ENV_PROCESS_MIB, build_vector_env

    monkeypatch.setattr(memory, "available_memory_mib", lambda: 3.5 * ASYNC_ENV_PROCESS_MIB)
    before = len(multiprocessing.active_children())
    with pytest.raises(ConfigError) as raised:
        build_vector_env(EnvFactory("CartPole-v1"), backend="async", n_envs=4, max_episode_length=None, seed=1)
    assert str(raised.value).startswith("worker.n_envs=4: 4 environment processes (worker.backend=async) need at "
                                        "least ")
    assert len(multiprocessing.active_children()) == before
    built = build_vector_env(EnvFactory("CartPole-v1"), backend="async", n_envs=3, max_episode_length=None, seed=1)
    built.venv.close()


def test_corral_evals_recording_check_asks_the_worker_before_any_episode() -> None:
    """``corral eval <native run> --video DIR`` said so only once the worker built its environments,
    after the sampler's prefix and after making DIR; the check before recording now asks the worker."""
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from corral.framework.plugins import get_registry
    from corral.framework.video import check_recordable

    vector = get_registry().get("worker", "vector").factory
    for args in ({}, {"backend": "envpool"}):
        with pytest.raises(ConfigError) as raised:
            check_recordable(EnvFactory("CartPole-v1"), vector, args)
        assert str(raised.value).startswith(f"worker.backend={args.get('backend', 'native')} makes all its "
                                            "environments inside one VectorEnv")
    check_recordable(EnvFactory("CartPole-v1"), vector, {"backend": "sync"})


@needs_envpool
def test_an_envpool_vector_env_is_made_without_gymnasiums_float32_notes() -> None:
    """EnvPool builds float32 Boxes from float64 bounds on first use of its spaces, and gymnasium said
    so in four two-line warnings at every start of an EnvPool run; nothing for the user to do."""
    import warnings

    from corral.framework.vector_env import build_vector_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        built = build_vector_env("CartPole-v1", backend="envpool", n_envs=2, max_episode_length=None, seed=1)
        try:
            assert built.venv.single_observation_space.shape == (4,) and built.venv.single_action_space.n == 2
        finally:
            built.venv.close()


@needs_envpool
def test_envpool_threads_give_the_same_episodes() -> None:
    """EnvPool seeds environment i with seed + i; its thread count does not change the episodes."""
    a = make_worker(n_envs=8, backend="envpool", num_threads=1).rollout(min_steps=300)
    b = make_worker(n_envs=8, backend="envpool", num_threads=2).rollout(min_steps=300)
    assert a.differences(b) == []


def test_same_seed_same_episodes_native_other_n_envs_differs() -> None:
    a = make_worker(n_envs=6).rollout(min_steps=200)
    b = make_worker(n_envs=6).rollout(min_steps=200)
    assert a.differences(b) == []
    assert make_worker(n_envs=6, seed=4).rollout(min_steps=200).differences(a) != []


def test_native_without_a_vector_entry_point_lists_the_ids_that_have_one() -> None:
    with pytest.raises(ConfigError, match=r"Acrobot-v1 has no vector entry point.*CartPole-v1.*worker.backend=sync"):
        make_worker("Acrobot-v1")


def test_unknown_backend_and_autoreset_mode_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="worker.backend='jax' is not one of native, envpool, sync, async"):
        VectorWorker(seed=0, max_episode_length=10, backend="jax")
    with pytest.raises(ConfigError, match="worker.autoreset_mode"):
        VectorWorker(seed=0, max_episode_length=10, autoreset_mode="sometimes")


@pytest.mark.parametrize("backend", ["native", "sync", "async"])
def test_num_threads_off_envpool_is_named_not_ignored(backend: str) -> None:
    from corral.framework.checks import ignored_values

    assert ignored_values(VectorWorkerConfig, {"backend": backend, "num_threads": 2}, "worker", given={"num_threads"}) == [
        f"worker.num_threads=2 has no effect while worker.backend={backend}: it applies only with "
        "worker.backend=envpool; set that, or leave worker.num_threads at its default (0)"]
    assert ignored_values(VectorWorkerConfig, {"backend": "envpool", "num_threads": 2}, "worker", given={"num_threads"}) == []


@pytest.mark.parametrize("backend", ["native", "envpool"])
@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_autoreset_mode_on_a_backend_with_its_own_is_named_not_ignored(backend: str, mode: str) -> None:
    from corral.framework.checks import ignored_values

    problems = ignored_values(VectorWorkerConfig, {"backend": backend, "autoreset_mode": mode}, "worker",
                              given={"autoreset_mode"})
    assert problems == [f"worker.autoreset_mode={mode} has no effect while worker.backend={backend}: it applies only "
                        "with worker.backend=sync or worker.backend=async; set that, or leave worker.autoreset_mode "
                        "at its default (next_step)"]
    for other in ("sync", "async"):
        assert ignored_values(VectorWorkerConfig, {"backend": other, "autoreset_mode": mode}, "worker",
                              given={"autoreset_mode"}) == []


def make_own_vector(num_envs: int = 2) -> gym.vector.VectorEnv:
    """A plugin's own VectorEnv (module level: picklable for worker processes)."""
    return gym.vector.SyncVectorEnv([lambda: gym.make(CARTPOLE, max_episode_steps=40)] * num_envs)


def test_options_for_a_built_vector_env_are_refused_for_a_source_s_own() -> None:
    from corral.framework.vector_env import build_vector_env

    for options in ({"backend": "sync", "autoreset_mode": "disabled"}, {"backend": "envpool", "num_threads": 2}):
        with pytest.raises(ConfigError, match="made its own VectorEnv.*do not apply to it"):
            build_vector_env(EnvFactory(make_own_vector), n_envs=2, max_episode_length=None, seed=0, **options)
    built = build_vector_env(EnvFactory(make_own_vector), backend="sync", n_envs=2, max_episode_length=None, seed=0)
    assert built.backend == "own"
    built.venv.close()


def test_a_source_that_makes_its_own_vector_env_is_taken_as_it_is() -> None:
    worker = make_worker(EnvFactory(make_own_vector), n_envs=3, backend="native")
    assert isinstance(worker.venv, gym.vector.SyncVectorEnv) and worker.venv.num_envs == 3
    assert worker.episode_limit == 40
    batch = worker.rollout(min_steps=100)
    assert len(batch) >= 100 and batch.lengths.max() <= 40


def test_async_backend() -> None:
    """AsyncVectorEnv (processes of its own) gives SyncVectorEnv's episodes."""
    a = make_worker(n_envs=3, backend="async")
    b = make_worker(n_envs=3, backend="sync")
    try:
        for _ in range(2):
            assert a.rollout(min_steps=120).differences(b.rollout(min_steps=120)) == []
        state = a.state_dict()
        want = a.rollout(min_steps=120)
        a.load_state_dict(state)
        assert a.rollout(min_steps=120).differences(want) == []
    finally:
        a.shutdown()
        b.shutdown()


@needs_envpool
def test_envpool_resume_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    worker = make_worker(n_envs=2, backend="envpool", num_threads=1)
    worker.rollout()
    state = worker.state_dict()
    vector_module._warned_fresh_resume.discard("envpool")
    with caplog.at_level(logging.WARNING, logger="corral.plugins.workers.vector"):
        worker.load_state_dict(state)
        worker.load_state_dict(state)
    messages = [r.getMessage() for r in caplog.records if "starts fresh episodes" in r.getMessage()]
    assert len(messages) == 1 and "worker.backend=envpool" in messages[0]
    assert worker.rollout().n_episodes == 2


def test_registered_and_listed() -> None:
    from corral.framework.plugins import get_registry

    reg = get_registry().get("worker", "vector")
    assert reg.factory is VectorWorker
    assert {"n_envs", "backend", "num_threads", "autoreset_mode", "timesteps_per_call"} <= set(
        reg.config.__dataclass_fields__)


@pytest.mark.parametrize("n_envs, max_episode_length, timesteps_per_call",
                         [(4, 30, 7), (3, None, 16), (8, 20, 5), (5, None, 1)])
def test_fragment_bookkeeping_after_the_loop_gives_the_per_step_batches(
        n_envs: int, max_episode_length: int | None, timesteps_per_call: int) -> None:
    """Under NEXT_STEP with the limit in the VectorEnv, fragments are cut out of the done flags after the
    stepping loop; the batches, the prior lengths and returns and the carried episodes are those of the
    per-step bookkeeping every other autoreset mode uses."""
    fast, slow = (make_worker(n_envs=n_envs, max_episode_length=max_episode_length,
                              timesteps_per_call=timesteps_per_call) for _ in range(2))
    slow._per_step_bookkeeping = True
    for _ in range(30):
        a, b = fast.rollout(), slow.rollout()
        assert len(a) >= n_envs * timesteps_per_call
        for name in ("observations", "actions", "rewards", "step_types", "lengths", "last_observations"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert a.episode_infos.keys() == b.episode_infos.keys() == {"prior_length", "prior_return"}
        assert a.agent_infos.keys() == b.agent_infos.keys()
        for infos_a, infos_b in ((a.episode_infos, b.episode_infos), (a.agent_infos, b.agent_infos)):
            for key in infos_b:
                assert np.array_equal(infos_a[key], infos_b[key]), key
        fa, fb = fast._frag, slow._frag
        assert fa is not None and fb is not None
        assert np.array_equal(fa["prev_done"], fb["prev_done"]) and np.array_equal(fa["obs"], fb["obs"])
        live = fb["rec"]
        assert np.array_equal(fa["rec"], live)
        assert np.array_equal(fa["t"][live], fb["t"][live]) and np.array_equal(fa["ret"][live], fb["ret"][live])
    assert fast.env_steps_taken == slow.env_steps_taken


def test_fragment_mode_still_gives_whole_episodes_when_asked_for_a_number() -> None:
    """Evaluation asks for whole episodes: rollout(n_episodes=n) returns them even in fragment mode."""
    worker = make_worker(n_envs=3, timesteps_per_call=5)
    assert worker.rollout().allow_fragments
    batch = worker.rollout(n_episodes=4)
    assert batch.n_episodes == 4 and batch.complete.all()


class WholeEpisodesAlgorithm:
    """An algorithm that needs whole episodes (as Monte-Carlo REINFORCE does)."""

    accepts_fragments = False


class WholeEpisodesPlugin:
    """Registers ``algo=whole_episodes`` inline."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        register("algo", "whole_episodes", WholeEpisodesAlgorithm, help="needs whole episodes")


def test_vector_fragments_are_refused_for_an_algorithm_that_needs_whole_episodes() -> None:
    from corral.framework.compose import validate
    from corral.framework.plugins import get_plugin_manager
    from corral.testing import compose_config

    manager = get_plugin_manager()
    manager.register_object(WholeEpisodesPlugin(), "whole_episodes_test")
    try:
        cfg = compose_config(["algo=whole_episodes", "worker=vector", "worker.timesteps_per_call=8"])
        with pytest.raises(ConfigError, match="algo=whole_episodes needs whole episodes.*worker.timesteps_per_call=0"):
            validate(cfg)
    finally:
        manager.unregister("whole_episodes_test")
    # The built-in on-policy algorithms bootstrap a cut fragment (as SB3's n_steps), the off-policy ones too.
    for algo in ("ppo", "vpg", "trpo"):
        validate(compose_config([f"algo={algo}", "worker=vector", "worker.timesteps_per_call=8"]))
    validate(compose_config(["worker=vector"]))
    validate(compose_config(["experiment=dqn_cartpole", "worker=vector", "worker.timesteps_per_call=8"]))


def test_a_backend_without_the_environment_is_refused_at_composition() -> None:
    from corral.framework.compose import validate
    from corral.testing import compose_config

    with pytest.raises(ConfigError, match=r"^Acrobot-v1 has no vector entry point.*worker.backend=sync"):
        validate(compose_config(["env=acrobot", "worker=vector"]))
    validate(compose_config(["env=acrobot", "worker=vector", "worker.backend=sync"]))
    if has_envpool():
        with pytest.raises(ConfigError, match="EnvPool has no environment 'Taxi-v4'; use worker.backend=sync"):
            validate(compose_config(["env=gym", "env.id=Taxi-v4", "worker=vector", "worker.backend=envpool"]))


@pytest.mark.parametrize(("backend", "env_id"), [
    ("native", "Acrobot-v1"),
    pytest.param("envpool", "Taxi-v4", marks=needs_envpool),
])
def test_composition_and_the_worker_refuse_a_backend_in_the_same_words(backend: str, env_id: str) -> None:
    """One check (``corral.framework.vector_env.check_backend``) for the config and for building the
    VectorEnv: the two said different things for EnvPool before."""
    from corral.framework.compose import validate
    from corral.testing import compose_config

    with pytest.raises(ConfigError) as composed:
        validate(compose_config(["env=gym", f"env.id={env_id}", "worker=vector", f"worker.backend={backend}"]))
    with pytest.raises(ConfigError) as built:
        make_worker(env_id, backend=backend)
    assert str(built.value) == str(composed.value)


@needs_envpool
def test_an_env_kwarg_envpool_does_not_take_is_one_line_at_composition_and_in_the_worker() -> None:
    """gymnasium's Pendulum-v1 takes ``g``; EnvPool's does not: the worker failed with EnvPool's
    ``Config.__new__() got an unexpected keyword argument 'g'`` under a line about an "environment
    update"."""
    from corral.framework.compose import validate
    from corral.testing import compose_config

    says = ("env.kwargs.g: EnvPool's Pendulum-v1 does not take 'g' (it takes max_episode_steps); gymnasium's own "
            "keyword arguments need worker.backend=sync (or async)")
    with pytest.raises(ConfigError) as composed:
        validate(compose_config(["env=pendulum", "env.kwargs.g=5.0", "worker=vector", "worker.backend=envpool"]))
    assert str(composed.value) == says
    with pytest.raises(ConfigError) as built:
        make_worker(EnvFactory("Pendulum-v1", {"g": 5.0}), backend="envpool")
    assert str(built.value) == says
    with pytest.raises(ConfigError, match=r"^env.kwargs.num_envs: worker=vector sets EnvPool's num_envs itself; give "
                                          r"worker.n_envs instead$"):
        make_worker(EnvFactory("Pendulum-v1", {"num_envs": 3}), backend="envpool")
    validate(compose_config(["env=pendulum", "env.kwargs.max_episode_steps=50", "worker=vector",
                             "worker.backend=envpool"]))


# ------------------------------------------------------------------- the contract through the action proxy
class TestNativeContractUnderProxy(TestNativeContract):
    """The worker contract with the worker's agent an action-server proxy (the agent the action_server and
    alternating samplers give workers): one batched forward pass per vector step, served elsewhere."""

    @pytest.fixture(autouse=True)
    def _servers(self) -> Any:
        self._action_servers: list[Any] = []
        yield
        for worker in self._workers:
            worker.agent = None  # the proxies hold their servers' semaphores
        for server in self._action_servers:
            server.close()

    def make_worker(self, *, seed: int, max_episode_length: int | None, env: Any, policy: Any) -> Any:
        import multiprocessing

        from corral.parallel.action_proxy import ActionProxy
        from corral.parallel.action_server import ActionServer
        from corral.plugins.samplers.action_server import server_policy

        factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length, n_workers=1,
                                worker_class=self.resolved_worker_class(), worker_args=dict(self.worker_args))
        worker = factory(0)
        self._workers.append(worker)
        worker.update_env(env)
        server = ActionServer(multiprocessing.get_context("spawn"), 1, [[0]], lambda p: server_policy(p, "cpu"),
                              lambda i: True, obs_bytes=1 << 20, resp_bytes=1 << 20, timeout=30.0)
        self._action_servers.append(server)
        server.start()
        server.apply_agent_update(copy.deepcopy(policy), 1)
        worker.update_agent(ActionProxy(0, endpoint=server.endpoint(0)))
        return worker


def test_an_async_environment_process_whose_pipe_breaks_before_it_ends_is_named() -> None:
    """An exiting process's pipes close an instant before the system reports that it ended: a killed
    environment process seen in that instant (a clean-clone CI run caught it) gave the pipe's
    ``ConnectionResetError`` instead of the process's slot, pid and exit. ``LingeringCartPole`` makes
    that instant half a second."""
    from corral.plugins.workers.vector import EnvironmentProcessLost

    env = EnvFactory("corral.testing.faulty_envs:corral/LingeringCartPole-v1", {"fail_at": 5, "linger_s": 0.5})
    worker = make_worker(env, n_envs=2, backend="async")
    try:
        # Both slots step alike, so both processes may have ended by the time the worker looks.
        slot = r"slot \d \(pid \d+\) exited with code 1"
        with pytest.raises(EnvironmentProcessLost, match=rf"^the environment process of {slot}(, {slot})?; "
                                                         r"worker.backend=async cannot go on without it"):
            worker.rollout(min_steps=100)
    finally:
        worker.shutdown()
