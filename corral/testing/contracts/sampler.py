"""The sampler contract: the same episodes as the local sampler, updates before sampling, bounded
shutdown with nothing left running, and environment failures as WorkerError."""

from __future__ import annotations

import copy
import os
import time
from typing import Any, ClassVar, Iterator, Mapping, Sequence

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError, CorralError, WorkerError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.framework.worker import Worker, WorkerFactory
from corral.testing.contracts.helpers import (
    DEFAULT_ENV_ID,
    RAISING_ENV_ID,
    _Baseline,
    _start_resource_tracker,
    acts_differently,
    env_spec_of,
    make_test_policy,
    perturbed,
)
from corral.testing.processes import (
    child_processes,
    cmdline,
    process_alive,
    shm_entries,
)


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
    - an agent update that cannot be applied (parameters of the wrong shape) is a
      :class:`~corral.framework.errors.WorkerError` naming the original exception, raised before
      any data of that round is returned or counted (never a batch sampled with the old agent);
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

    def test_a_failed_agent_update_is_a_worker_error(self) -> None:
        """Wrongly shaped parameters: a WorkerError naming the original exception, nothing sampled."""
        factory = self._factory()
        policy = self._policy()
        params = policy.get_param_values()
        sampler = self.open_sampler(factory, policy, self._env())
        sampler.obtain_samples(0, self.num_samples, params)
        steps = sampler.total_env_steps
        bad = {k: np.array(v, copy=True) for k, v in params.items()}
        key = next(k for k, v in bad.items() if v.ndim == 2)
        bad[key] = bad[key][:, :-1]  # one column short
        try:
            batch = sampler.obtain_samples(1, self.num_samples, bad)
        except WorkerError as error:
            assert "Error" in str(error).splitlines()[0], (
                f"the WorkerError does not name the exception the update raised: {error}"
            )
        else:
            raise AssertionError(
                f"{self._name()} returned {len(batch)} steps for parameters of the wrong shape ({key} one column "
                "short) instead of raising a WorkerError: the update failed and was ignored, so the batch was "
                "sampled with the previous agent"
            )
        assert sampler.total_env_steps == steps, "steps of the failed round were counted"

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

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """Every registered sampler option built by this class: its config defaults satisfy the ranges its
        fields declare (``corral.check``), and its numeric fields declare one."""
        from corral.testing.contracts.config import factory_config_problems

        problems = factory_config_problems("sampler", self.sampler_class)
        assert not problems, "; ".join(problems)
