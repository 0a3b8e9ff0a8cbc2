"""The worker contract: valid whole episodes, exact episode counts, TERMINAL/TIMEOUT step types,
seeding, state_dict round trips, agent updates and closing environments on shutdown."""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Iterator, Mapping

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.policy import Policy
from corral.framework.sampler import collect_share
from corral.framework.worker import Worker, WorkerFactory
from corral.testing.contracts.helpers import (
    DEFAULT_ENV_ID,
    _CloseTracker,
    acts_differently,
    env_spec_of,
    make_test_policy,
    perturbed,
    tracked,
)


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

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """Every registered worker option built by this class: its config defaults satisfy the ranges its
        fields declare (``corral.check``), and its numeric fields declare one."""
        from corral.testing.contracts.config import factory_config_problems

        problems = factory_config_problems("worker", self.resolved_worker_class())
        assert not problems, "; ".join(problems)
