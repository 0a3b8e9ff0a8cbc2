"""Contract test suites: what every sampler, worker and algorithm must do, as reusable pytest classes.

A plugin author subclasses a suite in a ``test_*.py`` file, sets a few class attributes (or
overrides a factory method), and pytest runs every check against the component::

    from corral.testing import AlgorithmContract, SamplerContract, WorkerContract

    class TestMySampler(SamplerContract):
        sampler_class = MySampler
        sampler_options = {"timeout": 60}      # keyword arguments of from_worker_factory

    class TestMyWorker(WorkerContract):
        worker_class = MyWorker                  # or a registered name: "my_worker"
        worker_args = {"n_envs": 2}

    class TestMyAlgorithm(AlgorithmContract):
        algo_name = "my_algo"                    # built from the registry with algo_config
        algo_config = {"learning_rate": 1e-3}

The suites are deliberately small: CartPole-v1, a 2-layer MLP policy, a few hundred steps. The
reference for "same episodes" is :class:`~corral.plugins.samplers.local.LocalSampler`, corral's
simplest sampler; anything that samples differently for the same seed, worker class and number of
workers breaks the contract that lets users switch samplers without changing results.

Every check bounds its waits: samplers get ``sampler_options`` (give them a ``timeout``), and the
leak checks poll for at most ``shutdown_timeout`` seconds.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, Sequence

import gymnasium as gym
import numpy as np
import pytest

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec, make_env
from corral.framework.errors import ConfigError, CorralError, WorkerError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler, collect_share
from corral.framework.worker import Worker, WorkerFactory
from corral.testing.processes import child_processes, cmdline, process_alive, shm_entries

#: gymnasium id of the environment every suite samples by default.
DEFAULT_ENV_ID = "CartPole-v1"
#: An environment whose ``step`` raises ``EnvironmentFailure`` (see :mod:`corral.testing.faulty_envs`).
RAISING_ENV_ID = "corral.testing.faulty_envs:corral/RaisingCartPole-v1"


# ---------------------------------------------------------------------------------------------- helpers
def make_test_policy(env_spec: EnvSpec, seed: int = 0, hidden_sizes: Sequence[int] = (32, 32)) -> Policy:
    """A small :class:`~corral.plugins.policies.mlp.MLPPolicy` whose weights depend only on ``seed``.

    torch's global RNG is left as it was.
    """
    import torch

    from corral.plugins.policies.mlp import MLPPolicy

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLPPolicy(env_spec, hidden_sizes=tuple(hidden_sizes))


def perturbed(params: Mapping[str, np.ndarray], scale: float = 0.5, seed: int = 12345) -> dict[str, np.ndarray]:
    """``params`` plus Gaussian noise on every float array: a policy that acts visibly differently."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in params.items():
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            arr = (arr + rng.normal(0.0, scale, size=arr.shape)).astype(arr.dtype)
        out[key] = arr.copy()
    return out


def env_spec_of(env: Any, max_episode_length: int | None = None) -> EnvSpec:
    """The EnvSpec of an environment source (id, EnvFactory, env), probing one instance."""
    probe = make_env(EnvFactory(env) if isinstance(env, str) else env)
    try:
        return EnvSpec.from_env(probe, max_episode_length)
    finally:
        probe.close()


def acts_differently(a: EpisodeBatch, b: EpisodeBatch) -> bool:
    """True when two batches sampled from the same start differ in actions or agent infos."""
    diffs = a.differences(b)
    return any(d == "actions" or d.startswith("agent_infos") or d == "lengths" for d in diffs)


class _CloseTracker(gym.Wrapper):
    """Wraps an environment and remembers whether ``close()`` reached it."""

    instances: ClassVar["weakref.WeakSet[_CloseTracker]"] = weakref.WeakSet()

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.closed = False
        _CloseTracker.instances.add(self)

    def close(self) -> None:
        """Close the environment and record it."""
        self.closed = True
        super().close()


def tracked_env(env_id: str = DEFAULT_ENV_ID, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` wrapped so a test can see that it was closed."""
    return tracked(EnvFactory(env_id, kwargs))


def tracked(source: Any) -> gym.Env:
    """A fresh environment from ``source`` (an id, :class:`EnvFactory`, env or callable) wrapped so
    a test can see that it was closed. ``EnvFactory(tracked, {"source": ...})`` makes such envs."""
    return _CloseTracker(make_env(EnvFactory(source) if isinstance(source, str) else source))


# ------------------------------------------------------------------------------------ process checks
def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, so it is not mistaken for a leaked child."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except Exception:  # noqa: BLE001 - platforms without it have nothing to mistake
        pass


@dataclass
class _Baseline:
    children: set[int]
    shm: set[str]
    seen_pids: set[int] = field(default_factory=set)


# ============================================================================================= samplers
class SamplerContract:
    """The sampler contract. Subclass it as ``Test...`` and set ``sampler_class``.

    Checks, each against :class:`~corral.plugins.samplers.local.LocalSampler` with the same seed,
    worker class and number of workers:

    - ``obtain_samples`` returns the same episodes (``EpisodeBatch.differences() == []``), whole
      episodes totalling at least ``num_samples`` steps, for every case in ``worker_cases``;
    - ``obtain_exact_episodes(n)`` returns exactly ``n`` episodes per worker, worker ``i``'s
      episodes in the ``i``-th block (checked against worker ``i`` built alone);
    - agent updates take effect before the next batch, on every worker: a batch equals what a
      fresh local sampler given only those parameters returns (never a mix of agent versions);
      new parameters change the actions; per-worker update lists work and a list of the wrong
      length is a ``ConfigError``;
    - ``shutdown_worker()`` is idempotent, ``with sampler:`` shuts down on exit, and a closed
      sampler refuses work (``closed_errors``);
    - an environment that raises in ``step`` surfaces as ``env_failure_errors`` (by default only
      :class:`~corral.framework.errors.WorkerError`, which must name the worker and the original
      exception type);
    - nothing is left running: no new child processes (``multiprocessing.active_children()`` and
      a ``/proc`` scan), no process of ``worker_pids()`` alive, no new ``/dev/shm`` entry named
      after this process or a worker (``corral_<pid>_...``) or starting with ``shm_prefixes``.

    Attributes to set:
        sampler_class: the sampler (required).
        sampler_options: keyword arguments for ``from_worker_factory`` (timeouts, resources).
        env_failure_errors: exceptions accepted when an environment raises. In-process samplers
            (like ``LocalSampler``) may let the environment's own exception through: add its type,
            e.g. ``(WorkerError, EnvironmentFailure)``.
        closed_errors: exceptions accepted from a shut-down sampler.
        worker_cases: (registered worker name or class, worker_args) pairs for the same-episodes check.
        n_workers, seed, max_episode_length, num_samples, n_exact_episodes: sizes of the checks.
        shutdown_timeout: seconds to wait for worker processes to go after shutdown.
        shm_prefixes: extra ``/dev/shm`` name prefixes this sampler's segments use.

    Methods to override when attributes are not enough: :meth:`make_sampler`,
    :meth:`worker_pids` (process ids of the workers, checked dead after shutdown; by default the
    sampler's ``worker_pids`` attribute when it has one).
    """

    sampler_class: ClassVar[type[Sampler] | None] = None
    sampler_options: ClassVar[Mapping[str, Any]] = {}
    env_failure_errors: ClassVar[tuple[type[BaseException], ...]] = (WorkerError,)
    closed_errors: ClassVar[tuple[type[BaseException], ...]] = (RuntimeError, CorralError)
    worker_cases: ClassVar[Sequence[tuple[str | type, Mapping[str, Any]]]] = (("default", {}), ("vec", {"n_envs": 2}))
    n_workers: ClassVar[int] = 2
    seed: ClassVar[int] = 7
    max_episode_length: ClassVar[int] = 50
    num_samples: ClassVar[int] = 240
    n_exact_episodes: ClassVar[int] = 2
    shutdown_timeout: ClassVar[float] = 20.0
    shm_prefixes: ClassVar[tuple[str, ...]] = ()
    env_id: ClassVar[str] = DEFAULT_ENV_ID

    # ------------------------------------------------------------------ hooks for subclasses
    def make_sampler(self, worker_factory: WorkerFactory, agents: Any, envs: Any) -> Sampler:
        """Build the sampler under test (default: ``sampler_class.from_worker_factory``)."""
        if self.sampler_class is None:
            raise TypeError(f"{type(self).__name__} must set sampler_class (or override make_sampler)")
        return self.sampler_class.from_worker_factory(worker_factory, agents, envs, **dict(self.sampler_options))

    def worker_pids(self, sampler: Sampler) -> list[int]:
        """Process ids of the sampler's workers (none for in-process samplers)."""
        return [p for p in (getattr(sampler, "worker_pids", None) or []) if p]

    # ------------------------------------------------------------------ pytest plumbing
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``worker_case`` with :attr:`worker_cases`."""
        if "worker_case" in metafunc.fixturenames:
            ids = [c if isinstance(c, str) else c.__name__ for c, _ in self.worker_cases]
            metafunc.parametrize("worker_case", list(self.worker_cases), ids=ids)

    @pytest.fixture(autouse=True)
    def _sampler_contract_guard(self) -> Iterator[None]:
        """Record what runs before the test; afterwards shut down every sampler it opened and
        check that nothing it started is left (reported as a teardown error)."""
        _start_resource_tracker()
        self._baseline = _Baseline(set(child_processes()), shm_entries())
        self._opened: list[Sampler] = []
        yield
        for sampler in self._opened:
            try:
                sampler.shutdown_worker()
            except Exception:  # noqa: BLE001 - keep shutting the others down
                pass
        problems = self._leftovers()
        assert not problems, "the sampler left things behind:\n" + "\n".join(problems)

    # ------------------------------------------------------------------ helpers
    def _env(self) -> EnvFactory:
        return EnvFactory(self.env_id)

    def _worker_class(self, case: str | type) -> type[Worker]:
        if isinstance(case, str):
            from corral.framework.plugins import get_registry

            return get_registry().get("worker", case).factory
        return case

    def _factory(self, worker_case: tuple[str | type, Mapping[str, Any]] | None = None) -> WorkerFactory:
        case, args = worker_case or self.worker_cases[0]
        return WorkerFactory(seed=self.seed, max_episode_length=self.max_episode_length, n_workers=self.n_workers,
                             worker_class=self._worker_class(case), worker_args=dict(args))

    def _policy(self) -> Policy:
        return make_test_policy(env_spec_of(self._env(), self.max_episode_length))

    def open_sampler(self, factory: WorkerFactory, agents: Any, envs: Any) -> Sampler:
        """Build the sampler under test; it is shut down after the test whatever happens."""
        sampler = self.make_sampler(factory, agents, envs)
        self._opened.append(sampler)
        self._baseline.seen_pids |= set(self.worker_pids(sampler))
        self._baseline.seen_pids |= set(child_processes()) - self._baseline.children
        return sampler

    def open_local(self, factory: WorkerFactory, agents: Any, envs: Any) -> Sampler:
        """The reference: a LocalSampler with the same factory."""
        from corral.plugins.samplers.local import LocalSampler

        sampler = LocalSampler.from_worker_factory(copy.deepcopy(factory), agents, envs)
        self._opened.append(sampler)
        return sampler

    def _leftovers(self) -> list[str]:
        """What the samplers of this test left behind, after waiting up to ``shutdown_timeout``."""
        base = self._baseline
        prefixes = tuple(f"corral_{pid}_" for pid in {os.getpid(), *base.seen_pids}) + tuple(self.shm_prefixes)
        deadline = time.monotonic() + self.shutdown_timeout
        while True:
            children = {p: c for p, c in child_processes().items() if p not in base.children}
            workers = [p for p in base.seen_pids if p not in base.children and process_alive(p)]
            segments = sorted(n for n in shm_entries() - base.shm if n.startswith(prefixes))
            if not (children or workers or segments) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        problems = [f"child process {p} still running: {c}" for p, c in sorted(children.items())]
        problems += [f"worker process {p} still running: {cmdline(p)}" for p in sorted(workers) if p not in children]
        problems += [f"shared-memory segment /dev/shm/{n} was not unlinked" for n in segments]
        return problems

    def assert_nothing_left_running(self) -> None:
        """Fail if a process or shared-memory segment of this test's samplers is still there."""
        problems = self._leftovers()
        assert not problems, "after shutdown_worker():\n" + "\n".join(problems)

    def _name(self) -> str:
        return getattr(self.sampler_class, "__name__", type(self).__name__)

    # ------------------------------------------------------------------ the checks
    def test_obtain_samples_matches_local_sampler(self, worker_case: tuple[str | type, Mapping[str, Any]]) -> None:
        """Same seed, worker and n_workers: the same whole episodes as LocalSampler, call after call."""
        factory = self._factory(worker_case)
        policy = self._policy()
        params0 = policy.get_param_values()
        params1 = perturbed(params0)
        env = self._env()
        reference = self.open_local(factory, policy, env)
        sampler = self.open_sampler(factory, policy, env)
        returns_fragments = getattr(factory.worker_class, "returns_fragments", False)
        for itr, params in enumerate((params0, params0, params1)):
            want = reference.obtain_samples(itr, self.num_samples, params)
            got = sampler.obtain_samples(itr, self.num_samples, params)
            assert isinstance(got, EpisodeBatch), f"obtain_samples returned {type(got).__name__}, not an EpisodeBatch"
            assert len(got) >= self.num_samples, f"call {itr}: {len(got)} steps, asked for at least {self.num_samples}"
            if not returns_fragments:
                assert got.complete.all(), f"call {itr}: obtain_samples returned a cut episode (not TERMINAL/TIMEOUT)"
            diffs = got.differences(want)
            assert diffs == [], (
                f"call {itr} (worker={worker_case[0]}): {self._name()} returned episodes that differ from "
                f"LocalSampler's for the same seed in {diffs}"
            )
        assert sampler.total_env_steps == reference.total_env_steps, "total_env_steps does not count the steps returned"

    def test_obtain_exact_episodes_in_worker_order(self, worker_case: tuple[str | type, Mapping[str, Any]]) -> None:
        """Exactly n episodes per worker, worker i's in the i-th block, equal to LocalSampler's."""
        factory = self._factory(worker_case)
        if getattr(factory.worker_class, "returns_fragments", False):
            pytest.skip("a fragment worker returns a fixed number of steps, not whole episodes")
        policy = self._policy()
        params = policy.get_param_values()
        env = self._env()
        n = self.n_exact_episodes
        sampler = self.open_sampler(factory, policy, env)
        got = sampler.obtain_exact_episodes(n, params)
        assert got.n_episodes == n * self.n_workers, (
            f"obtain_exact_episodes({n}) with {self.n_workers} workers returned {got.n_episodes} episodes"
        )
        assert got.complete.all()
        episodes = got.split()
        for i in range(self.n_workers):
            worker = factory(i)
            try:
                worker.update_env(env)
                worker.update_agent(copy.deepcopy(policy))
                worker.update_agent(params)
                alone = worker.rollout(n_episodes=n)
            finally:
                worker.shutdown()
            block = EpisodeBatch.concatenate(*episodes[i * n : (i + 1) * n])
            assert block.differences(alone) == [], (
                f"episodes {i * n}..{(i + 1) * n - 1} are not worker {i}'s: results must come in worker order"
            )
        reference = self.open_local(factory, policy, env)
        assert got.differences(reference.obtain_exact_episodes(n, params)) == [], "differs from LocalSampler's"
        again = sampler.obtain_exact_episodes(n, params)
        diffs = again.differences(reference.obtain_exact_episodes(n, params))
        assert diffs == [], f"the second call differs from LocalSampler's in {diffs}"

    def test_agent_updates_apply_to_every_worker_before_sampling(self) -> None:
        """A batch holds only episodes of the agent it was asked for; per-worker lists are honoured."""
        factory = self._factory()
        policy = self._policy()
        params0 = policy.get_param_values()
        params1 = perturbed(params0)
        policy1 = copy.deepcopy(policy)
        policy1.set_param_values(params1)
        env = self._env()
        sampler = self.open_sampler(factory, policy, env)
        first = sampler.obtain_samples(0, self.num_samples, params1)
        # A fresh local sampler that only ever had the new parameters.
        only_new = self.open_local(factory, policy1, env).obtain_samples(0, self.num_samples, params1)
        assert first.differences(only_new) == [], (
            "the first batch after an agent update differs from a sampler that only had the new parameters: "
            "some worker sampled (part of) it with the old agent"
        )
        only_old = self.open_local(factory, policy, env).obtain_samples(0, self.num_samples, params0)
        assert acts_differently(first, only_old), "new parameters did not change the actions: the update was ignored"

        reference = self.open_local(factory, policy, env)
        reference.obtain_samples(0, self.num_samples, params1)
        spread = [params1 if i % 2 else params0 for i in range(self.n_workers)]
        for itr, update in enumerate([params0, params1, spread], start=1):
            want = reference.obtain_samples(itr, self.num_samples, update)
            got = sampler.obtain_samples(itr, self.num_samples, update)
            what = "a per-worker list of parameters" if isinstance(update, list) else "a broadcast update"
            assert got.differences(want) == [], f"call {itr} with {what} differs from LocalSampler's"
        with pytest.raises(ConfigError):
            sampler.obtain_samples(9, self.num_samples, [params0] * (self.n_workers + 1))

    def test_shutdown_is_idempotent_and_a_closed_sampler_refuses_work(self) -> None:
        """``with`` shuts down, ``shutdown_worker()`` again is a no-op, a closed sampler raises."""
        factory = self._factory()
        policy = self._policy()
        params = policy.get_param_values()
        sampler = self.open_sampler(factory, policy, self._env())
        with sampler as entered:
            assert entered is sampler, "`with sampler as s` must give the sampler itself"
            entered.obtain_exact_episodes(1, params)
        sampler.shutdown_worker()
        sampler.shutdown_worker()
        with pytest.raises(self.closed_errors):
            sampler.obtain_samples(1, self.num_samples, params)
        with pytest.raises(self.closed_errors):
            sampler.obtain_exact_episodes(1, params)
        self.assert_nothing_left_running()

    def test_nothing_left_running_after_shutdown(self) -> None:
        """No process, Ray actor process or shared-memory segment outlives ``shutdown_worker()``."""
        factory = self._factory(self.worker_cases[-1])
        policy = self._policy()
        sampler = self.open_sampler(factory, policy, self._env())
        params = perturbed(policy.get_param_values())
        sampler.obtain_samples(0, self.num_samples, params)
        sampler.obtain_samples(1, self.num_samples, [params] * self.n_workers)
        self._baseline.seen_pids |= set(child_processes()) - self._baseline.children
        sampler.shutdown_worker()
        self.assert_nothing_left_running()

    def test_environment_error_becomes_worker_error(self) -> None:
        """An environment raising in ``step`` is reported (a WorkerError naming the worker), not hung on."""
        factory = self._factory()
        policy = self._policy()
        env = EnvFactory(RAISING_ENV_ID, {"fail_at": 20})
        sampler = self.open_sampler(factory, policy, env)
        with pytest.raises(self.env_failure_errors) as info:
            sampler.obtain_samples(0, self.num_samples, policy.get_param_values())
        error = info.value
        if isinstance(error, WorkerError):
            assert error.worker_number is not None and 0 <= error.worker_number < self.n_workers, (
                f"WorkerError.worker_number is {error.worker_number!r}; it must name the failed worker"
            )
            assert "EnvironmentFailure" in str(error), f"the error does not name the original exception: {error}"
        sampler.shutdown_worker()
        sampler.shutdown_worker()
        self.assert_nothing_left_running()


# ============================================================================================== workers
class WorkerContract:
    """The worker contract. Subclass it as ``Test...`` and set ``worker_class`` (and ``worker_args``).

    Checks, on CartPole with a small MLP policy (both can be changed, see below):

    - ``rollout()`` returns a valid :class:`EpisodeBatch` of whole episodes (fragments only when
      the class sets ``returns_fragments``), with actions in the action space;
    - ``rollout(n_episodes=n)`` returns exactly ``n`` episodes (not for fragment workers);
      ``rollout(min_steps=m)`` at least ``m`` steps (fragment workers: repeated rollouts do);
    - step types: an episode the environment ends is ``TERMINAL``; one cut by
      ``max_episode_length`` or by the environment's own time limit is ``TIMEOUT``;
    - the same seed gives the same episodes, another seed different ones;
    - ``state_dict()`` / ``load_state_dict()``: the rollout after a restore (in the same or a
      freshly built worker) equals the rollout that followed the saved state;
    - ``update_agent(params)`` changes behaviour, and updating back restores it;
    - ``shutdown()`` closes every environment the worker made.

    Attributes: ``worker_class`` (a class or a registered worker name), ``worker_args``,
    ``seed``, ``max_episode_length``, ``min_steps``, ``env_id``. Override :meth:`make_worker` to
    build workers another way.

    Workers for other environments and agents (meta-RL trial workers, for example) override small
    methods, each defaulting to what is described above:

    - :meth:`make_env`: the environment every check gives its workers (``env_id`` by default), also
      with its own time limit set (``max_episode_steps``) for the TIMEOUT check;
    - :meth:`make_terminating_env`: the environment of the TERMINAL check, one that ends episodes
      by itself under the initial policy (by default :meth:`make_env`'s);
    - :meth:`make_env_update`: an env update every worker gets after its environment, such as
      the tasks of a meta-RL worker (by default none);
    - :meth:`make_policy`: the agent, from the environment's spec (by default a small MLP);
    - :meth:`episode_ends`: what counts as an environment episode in a batch, for the step-type
      and episode-length checks (by default each episode of the batch; a worker that returns a
      trial of several environment episodes as one batch episode names them here).
    """

    worker_class: ClassVar[type[Worker] | str | None] = None
    worker_args: ClassVar[Mapping[str, Any]] = {}
    seed: ClassVar[int] = 5
    max_episode_length: ClassVar[int] = 100
    min_steps: ClassVar[int] = 120
    env_id: ClassVar[str] = DEFAULT_ENV_ID

    # ------------------------------------------------------------------ hooks for subclasses
    def resolved_worker_class(self) -> type[Worker]:
        """``worker_class``, looked up in the registry when it is a name."""
        if self.worker_class is None:
            raise TypeError(f"{type(self).__name__} must set worker_class (or override make_worker)")
        if isinstance(self.worker_class, str):
            from corral.framework.plugins import get_registry

            return get_registry().get("worker", self.worker_class).factory
        return self.worker_class

    def make_worker(self, *, seed: int, max_episode_length: int | None, env: Any, policy: Policy) -> Worker:
        """Worker 0 of a one-worker :class:`WorkerFactory`, given ``env`` (then :meth:`make_env_update`'s
        update, if any) and a copy of ``policy``."""
        factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length, n_workers=1,
                                worker_class=self.resolved_worker_class(), worker_args=dict(self.worker_args))
        worker = factory(0)
        self._workers.append(worker)
        worker.update_env(env)
        update = self.make_env_update()
        if update is not None:
            worker.update_env(update)
        worker.update_agent(copy.deepcopy(policy))
        return worker

    def make_env(self, max_episode_steps: int | None = None) -> Any:
        """The environment source (gymnasium id, :class:`EnvFactory`, env) the checks give workers.

        ``max_episode_steps``: when given, the environment's own time limit (gymnasium's
        ``TimeLimit``) instead of its default. The environment must not end an episode by itself
        within 5 steps: the TIMEOUT check cuts episodes at 5 steps and expects every one to be cut.
        Default: ``EnvFactory(env_id)``.
        """
        if max_episode_steps is None:
            return EnvFactory(self.env_id)
        return EnvFactory(self.env_id, {"max_episode_steps": max_episode_steps})

    def make_terminating_env(self) -> Any:
        """The environment source of the TERMINAL check: under the initial policy, the environment
        itself ends every episode (``terminated``) before its own time limit. Default:
        :meth:`make_env` (CartPole falls long before its 500-step limit)."""
        return self.make_env()

    def make_env_update(self) -> Any:
        """An env update :meth:`make_worker` gives every worker after its environment, or None (the
        default). Meta-RL workers get their tasks this way, as their algorithms send them: a
        :class:`~corral.meta.tasks.TaskSchedule` puts the tasks into the worker's ``state_dict()``."""
        return None

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> Policy:
        """The agent for an environment with ``env_spec``; its weights depend only on ``seed``.
        Default: :func:`make_test_policy` (a small MLP)."""
        return make_test_policy(env_spec, seed=seed)

    def episode_ends(self, batch: EpisodeBatch) -> tuple[np.ndarray, np.ndarray]:
        """The step type of the last step and the length of every environment episode in ``batch``.

        Default: the batch's own episodes. A worker whose batch episodes are trials of several
        environment episodes (``worker=rl2``) returns the inner episodes, so the step-type and
        ``max_episode_length`` checks see what the environment and the limit did.
        """
        return batch.step_types[np.cumsum(batch.lengths) - 1], np.asarray(batch.lengths)

    # ------------------------------------------------------------------ pytest plumbing
    @pytest.fixture(autouse=True)
    def _worker_contract_guard(self) -> Iterator[None]:
        """Shut down every worker the test built."""
        self._workers: list[Worker] = []
        yield
        for worker in self._workers:
            try:
                worker.shutdown()
            except Exception:  # noqa: BLE001 - shut the others down too
                pass

    # ------------------------------------------------------------------ helpers
    @property
    def returns_fragments(self) -> bool:
        """Whether the worker under test may return episode fragments."""
        return bool(getattr(self.resolved_worker_class(), "returns_fragments", False))

    def _policy(self, env: Any = None) -> Policy:
        return self.make_policy(env_spec_of(env or self.make_env(), self.max_episode_length))

    def worker(self, seed: int | None = None, max_episode_length: int | None = -1, env: Any = None,
               policy: Policy | None = None) -> Worker:
        """A worker with the suite's defaults (``max_episode_length=-1``: the suite's value)."""
        env = env or self.make_env()
        mel = self.max_episode_length if max_episode_length == -1 else max_episode_length
        return self.make_worker(seed=self.seed if seed is None else seed, max_episode_length=mel, env=env,
                                policy=policy or self._policy(env))

    def sample(self, worker: Worker, min_steps: int | None = None) -> EpisodeBatch:
        """At least ``min_steps`` steps, by repeated rollouts (what every sampler does)."""
        return collect_share(worker, self.min_steps if min_steps is None else min_steps)

    # ------------------------------------------------------------------ the checks
    def test_rollout_returns_valid_episodes(self) -> None:
        """``rollout()``: a non-empty EpisodeBatch of whole episodes, actions within the action space."""
        worker = self.worker()
        batch = worker.rollout()
        assert isinstance(batch, EpisodeBatch), f"rollout() returned {type(batch).__name__}, not an EpisodeBatch"
        assert batch.n_episodes >= 1 and len(batch) >= 1, "rollout() returned nothing"
        if not self.returns_fragments:
            assert batch.complete.all(), "rollout() returned a cut episode but the worker does not set returns_fragments"
        spec = env_spec_of(self.make_env())
        assert batch.observations.shape[1:] == spec.observation_space.shape
        assert batch.last_observations.shape == (batch.n_episodes, *spec.observation_space.shape)
        assert np.isfinite(batch.rewards).all()
        assert int(self.episode_ends(batch)[1].max()) <= self.max_episode_length
        space = spec.action_space
        for action in batch.actions[:200]:
            assert space.contains(np.asarray(action, dtype=space.dtype)), f"action {action!r} is not in {space}"

    def test_rollout_n_episodes_is_exact(self) -> None:
        """``rollout(n_episodes=n)`` returns exactly n whole episodes."""
        if self.returns_fragments:
            pytest.skip("a fragment worker returns a fixed number of steps, not a number of episodes")
        worker = self.worker()
        for n in (1, 3, 5):
            batch = worker.rollout(n_episodes=n)
            assert batch.n_episodes == n, f"rollout(n_episodes={n}) returned {batch.n_episodes} episodes"
            assert batch.complete.all()

    def test_rollout_min_steps(self) -> None:
        """``rollout(min_steps=m)`` returns at least m steps of whole episodes (fragment workers:
        repeated rollouts reach m, as samplers require)."""
        worker = self.worker()
        m = self.min_steps
        if self.returns_fragments:
            batch = self.sample(worker, m)
            assert len(batch) >= m
            return
        batch = worker.rollout(min_steps=m)
        assert len(batch) >= m, f"rollout(min_steps={m}) returned {len(batch)} steps"
        assert batch.complete.all()

    def test_step_types_terminal_and_timeout(self) -> None:
        """TERMINAL when the environment ends an episode; TIMEOUT when max_episode_length or the
        environment's own time limit cuts it (episodes as :meth:`episode_ends` counts them)."""

        def ends(batch: EpisodeBatch) -> tuple[np.ndarray, np.ndarray]:
            last, lengths = self.episode_ends(batch)
            done = (last == StepType.TERMINAL) | (last == StepType.TIMEOUT)
            assert done.any(), "no episode ended in the sample; the check needs some"
            return last[done], lengths[done]

        # CartPole cannot fall within 5 steps, whatever the actions: every episode is cut (make_env()'s
        # environment must not end an episode by itself that soon either).
        cut = 5
        for label, worker in (
            ("max_episode_length=5", self.worker(max_episode_length=cut)),
            ("the environment's own time limit (max_episode_steps=5)",
             self.worker(max_episode_length=None, env=self.make_env(max_episode_steps=cut))),
        ):
            last, lengths = ends(self.sample(worker, 60))
            assert (last == StepType.TIMEOUT).all(), f"episodes cut by {label} must end with TIMEOUT, got {last}"
            if not self.returns_fragments:
                assert (lengths == cut).all(), f"episodes cut by {label} must have {cut} steps, got {lengths}"
        # The initial policy is close to uniform: CartPole falls long before its 500-step limit
        # (make_terminating_env() names another environment that ends its episodes by itself).
        env = self.make_terminating_env()
        own_limit = env_spec_of(env).max_episode_length
        assert own_limit is not None, "make_terminating_env() must give an environment with its own time limit"
        last, lengths = ends(self.sample(self.worker(max_episode_length=None, env=env), 200))
        assert (last == StepType.TERMINAL).all(), f"episodes ended by the environment must end with TERMINAL, got {last}"
        assert (lengths < own_limit).all()

    def test_same_seed_same_episodes_other_seed_different(self) -> None:
        """Seeds alone decide the episodes."""
        a = self.sample(self.worker(seed=self.seed))
        b = self.sample(self.worker(seed=self.seed))
        c = self.sample(self.worker(seed=self.seed + 1))
        assert a.differences(b) == [], "two workers with the same seed returned different episodes"
        assert "observations" in a.differences(c), "workers with different seeds returned the same observations"

    def test_state_dict_round_trip(self) -> None:
        """Restoring ``state_dict()`` (here or in a fresh worker) reproduces the next rollout."""
        worker = self.worker()
        self.sample(worker)
        state = copy.deepcopy(worker.state_dict())
        following = self.sample(worker)
        worker.load_state_dict(copy.deepcopy(state))
        assert self.sample(worker).differences(following) == [], "load_state_dict did not restore the sampling state"
        fresh = self.worker()
        fresh.load_state_dict(copy.deepcopy(state))
        assert self.sample(fresh).differences(following) == [], (
            "a freshly built worker given the saved state did not continue like the original"
        )

    def test_update_agent_with_params_changes_behaviour(self) -> None:
        """New parameters change the actions; the old parameters bring the old actions back."""
        policy = self._policy()
        params0 = policy.get_param_values()
        params1 = perturbed(params0)
        baseline = self.sample(self.worker(policy=policy))
        changed = self.worker(policy=policy)
        changed.update_agent(params1)
        assert acts_differently(self.sample(changed), baseline), "update_agent(new params) did not change the actions"
        restored = self.worker(policy=policy)
        restored.update_agent(params1)
        restored.update_agent(params0)
        assert self.sample(restored).differences(baseline) == [], "update_agent(params) did not fully set the parameters"

    def test_shutdown_closes_environments(self) -> None:
        """``shutdown()`` closes every environment the worker made."""
        before = set(_CloseTracker.instances)
        worker = self.worker(env=EnvFactory(tracked, {"source": self.make_env()}))
        worker.rollout()
        made = [e for e in _CloseTracker.instances if e not in before]
        assert made, "the worker made no environment from its EnvFactory"
        worker.shutdown()
        still_open = [e for e in made if not e.closed]
        assert not still_open, f"{len(still_open)} of {len(made)} environments were not closed by shutdown()"


# =========================================================================================== algorithms
class AlgorithmContract:
    """The algorithm contract. Subclass it as ``Test...`` and set ``algo_name`` (or override
    :meth:`make_algorithm`).

    Checks, on a real batch of CartPole episodes from the local sampler:

    - ``train_once(itr, episodes)`` returns a dict of finite float statistics;
    - it changes the policy's parameters;
    - ``state_dict()`` / ``load_state_dict()``: a second algorithm built with another seed and
      loaded with the first one's state trains identically on the same batch (same parameters,
      same statistics).

    Attributes: ``algo_name`` (registered name) with ``algo_config`` (fields of its config
    dataclass), ``worker`` (registered worker used to collect), ``batch_size``, ``seed``,
    ``max_episode_length``, ``env_id``.
    """

    algo_name: ClassVar[str | None] = None
    algo_config: ClassVar[Mapping[str, Any]] = {}
    worker: ClassVar[str] = "default"
    batch_size: ClassVar[int] = 400
    seed: ClassVar[int] = 1
    max_episode_length: ClassVar[int] = 200
    env_id: ClassVar[str] = DEFAULT_ENV_ID

    def make_algorithm(self, env_spec: EnvSpec, policy: Policy, seed: int) -> Algorithm:
        """Build the algorithm under test (default: the registered ``algo_name`` with ``algo_config``)."""
        if self.algo_name is None:
            raise TypeError(f"{type(self).__name__} must set algo_name (or override make_algorithm)")
        from corral.framework.config import config_of
        from corral.framework.plugins import get_registry

        reg = get_registry().get("algo", self.algo_name)
        return reg.factory(config_of(reg, dict(self.algo_config)), env_spec=env_spec, policy=policy,
                           sampler=None, seed=seed)

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> Policy:
        """The policy the algorithm trains (an MLP by default)."""
        return make_test_policy(env_spec, seed=seed)

    # ------------------------------------------------------------------ helpers
    def env_spec(self) -> EnvSpec:
        """The spec of the suite's environment."""
        return env_spec_of(EnvFactory(self.env_id), self.max_episode_length)

    def collect(self, policy: Policy, itr: int = 0, seed: int | None = None) -> EpisodeBatch:
        """A real batch: ``batch_size`` steps from the local sampler with ``policy``."""
        from corral.framework.plugins import get_registry
        from corral.plugins.samplers.local import LocalSampler

        worker_class = get_registry().get("worker", self.worker).factory
        with LocalSampler(agents=copy.deepcopy(policy), envs=EnvFactory(self.env_id), seed=self.seed if seed is None else seed,
                          max_episode_length=self.max_episode_length, worker_class=worker_class) as sampler:
            return sampler.obtain_samples(itr, self.batch_size, policy.get_param_values())

    @staticmethod
    def _params(policy: Policy) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in policy.get_param_values().items()}

    # ------------------------------------------------------------------ the checks
    def test_train_once_returns_float_stats(self) -> None:
        """``train_once`` returns ``{name: finite float}``."""
        spec = self.env_spec()
        policy = self.make_policy(spec)
        algo = self.make_algorithm(spec, policy, self.seed)
        stats = algo.train_once(0, self.collect(algo.policy))
        assert isinstance(stats, dict) and stats, f"train_once returned {stats!r}; expected a non-empty dict"
        for key, value in stats.items():
            assert isinstance(key, str), f"statistic name {key!r} is not a string"
            assert isinstance(value, numbers.Real) and not isinstance(value, bool), (
                f"statistic {key!r} is {type(value).__name__}, not a float"
            )
            assert math.isfinite(float(value)), f"statistic {key!r} is {value}"

    def test_train_once_changes_the_policy(self) -> None:
        """``train_once`` on a real batch changes the policy parameters."""
        spec = self.env_spec()
        algo = self.make_algorithm(spec, self.make_policy(spec), self.seed)
        before = self._params(algo.policy)
        algo.train_once(0, self.collect(algo.policy))
        after = self._params(algo.policy)
        assert any(not np.array_equal(before[k], after[k]) for k in before), "train_once left every parameter unchanged"
        update = algo.get_agent_update()
        if isinstance(update, Mapping):
            assert all(np.array_equal(np.asarray(update[k]), after[k]) for k in after if k in update), (
                "get_agent_update() does not carry the trained parameters"
            )

    def test_state_dict_round_trip_trains_identically(self) -> None:
        """Two copies, one restored from the other's ``state_dict()``, train identically."""
        spec = self.env_spec()
        first = self.make_algorithm(spec, self.make_policy(spec, seed=0), self.seed)
        first.train_once(0, self.collect(first.policy, 0))  # optimiser state, RNG draws, counters
        state = copy.deepcopy(first.state_dict())
        second = self.make_algorithm(spec, self.make_policy(spec, seed=1), self.seed + 1)
        second.load_state_dict(state)
        batch = self.collect(first.policy, 1, seed=self.seed + 1)
        a = self._params(first.policy)
        b = self._params(second.policy)
        assert all(np.array_equal(a[k], b[k]) for k in a), "load_state_dict did not restore the policy parameters"
        stats_first = first.train_once(1, batch)
        stats_second = second.train_once(1, batch)
        a = self._params(first.policy)
        b = self._params(second.policy)
        differing = [k for k in a if not np.array_equal(a[k], b[k])]
        assert not differing, f"after training on the same batch the restored copy differs in {differing}"
        assert stats_first.keys() == stats_second.keys()
        for key in stats_first:
            x, y = float(stats_first[key]), float(stats_second[key])
            assert x == y or (math.isnan(x) and math.isnan(y)), f"statistic {key!r}: {x} vs {y}"


__all__ = [
    "AlgorithmContract",
    "SamplerContract",
    "WorkerContract",
    "acts_differently",
    "child_processes",
    "env_spec_of",
    "make_test_policy",
    "perturbed",
    "process_alive",
    "shm_entries",
    "tracked",
    "tracked_env",
]
