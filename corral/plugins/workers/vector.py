"""``worker=vector``: one ``gymnasium.vector.VectorEnv`` of ``n_envs`` environments, one ``step`` call per step.

Where ``worker=vec`` calls ``env.step`` once per environment in a Python loop, this worker hands all
of them to a VectorEnv that steps them in one call (gymnasium's vector entry points, EnvPool,
gymnasium's Sync/AsyncVectorEnv, or a plugin's own VectorEnv) and keeps its own bookkeeping in
array code: episode ends, lengths, which slots restart, the time-major step log. No Python loop
runs over environments per step.

``worker.backend`` picks the VectorEnv:

- ``native``: the environment id's own vector entry point (``gymnasium.make_vec(id,
  vectorization_mode="vector_entry_point")``, e.g. CartPole-v1);
- ``envpool``: ``envpool.make(id, env_type="gymnasium", ...)`` (``pip install 'corral[envpool]'``);
- ``sync`` / ``async``: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` over the env preset;
- whatever the backend, an environment source that makes a ``VectorEnv`` itself is used as it is.

Every autoreset mode is handled (``NEXT_STEP``, ``SAME_STEP``, ``DISABLED``); a reset observation is
never recorded as a transition, the final observation of a truncated episode is kept as the
episode's last observation, TERMINAL and TIMEOUT stay apart. See docs/vector.md for seeding and
snapshots per backend.
"""

from __future__ import annotations

import functools
import logging
import pickle
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.checks import check
from corral.framework.env import EnvFactory, child_seed, seed_int
from corral.framework.errors import ConfigError
from corral.framework.sampler import runs_workers_in_daemon_processes
from corral.framework.vector_env import (
    AUTORESET_MODES,
    BACKENDS,
    RECORDING_NEEDS_SYNC,
    BuiltVectorEnv,
    async_in_daemon_message,
    autoreset_mode_of,
    build_vector_env,
    check_backend,
    check_room_for_async_envs,
    check_source,
    min_limit,
)
from corral.framework.video import VIDEO_SLOT_INFO, RecordedEnvFactory
from corral.framework.worker import Worker, observation_mismatch, observation_problem, observation_shape
from corral.parallel.worker_process import describe_exit
from corral.rl.episode_buffer import StepLog, action_clipper
from corral.rl.episode_stitching import RunningEpisodes, join_fragments

logger = logging.getLogger(__name__)

_warned_fresh_resume: set[str] = set()
#: A whole-episode rollout may return this many times ``min_steps`` before the worker says why, once.
OVERSIZE_FACTOR = 4


#: Seconds a broken pipe to an environment process waits for the system to report the process ended.
_EXIT_NOTICE_S = 2.0


class EnvironmentProcessLost(RuntimeError):
    """An environment process of ``worker.backend=async`` is gone (killed, or it exited)."""


_M = TypeVar("_M", bound=Callable[..., Any])


def _reports_lost_processes(method: _M) -> _M:
    """``method`` of a VectorWorker, where a broken pipe to an AsyncVectorEnv's environment process
    that is gone raises :class:`EnvironmentProcessLost` naming its slot, pid and exit, not the pipe's
    ``BrokenPipeError`` / ``EOFError``."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (BrokenPipeError, EOFError, ConnectionResetError) as exc:
            processes = list(getattr(self.venv, "processes", ()))
            # A process's pipes close as it exits, an instant before the system reports it ended: wait
            # that instant (a pipe that broke with every process alive is not this error).
            deadline = time.monotonic() + _EXIT_NOTICE_S
            while processes and all(p.is_alive() for p in processes) and time.monotonic() < deadline:
                time.sleep(0.02)
            gone = [f"slot {i} (pid {p.pid}) {describe_exit(p.exitcode)}" for i, p in enumerate(processes)
                    if not p.is_alive()]
            if not gone:
                raise
            raise EnvironmentProcessLost(
                f"the environment process of {', '.join(gone)}; worker.backend=async cannot go on without it"
            ) from exc
    return wrapper  # type: ignore[return-value]  # the same signature as method's


#: numpy's words when an AsyncVectorEnv's environment process writes an observation of another shape
#: into the shared batch (the process's slot and the observation itself stay there).
_BROADCAST = re.compile(r"could not broadcast input array from shape (\([0-9, ]*\)) into shape (\([0-9, ]*\))")


def _reports_observation_mismatch(method: _M) -> _M:
    """``method`` of a VectorWorker, where an error of the VectorEnv that could not put a sub-environment's
    observation into its batch (a SyncVectorEnv's ``Output array is the wrong shape``) raises
    :class:`~corral.framework.worker.ObservationMismatch` naming the environment and the observation
    (:meth:`VectorWorker.mismatch_behind`). Nothing is checked until something raised."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as exc:
            mismatch = self.mismatch_behind(exc)
            if mismatch is None:
                raise
            raise mismatch from exc
    return wrapper  # type: ignore[return-value]  # the same signature as method's


@dataclass
class VectorWorkerConfig:
    """Settings of the vector worker (one gymnasium VectorEnv per worker)."""

    n_envs: int = field(default=16, metadata=check(ge=1, help="environments in the worker's VectorEnv"))
    backend: str = field(default="native", metadata=check(choices=BACKENDS, help="native (the env id's vector entry point), envpool, sync or async (gymnasium's "
                "Sync/AsyncVectorEnv over the env preset)"))
    num_threads: int = field(default=0, metadata=check(ge=0, applies_if=("backend", "==", "envpool"),
                                                       help="EnvPool threads (0: EnvPool's default)"))
    autoreset_mode: str = field(default="next_step", metadata=check(
        choices=tuple(AUTORESET_MODES), applies_if=(("backend", "==", "sync"), ("backend", "==", "async")),
        help="autoreset mode of the sync/async backends: next_step, same_step or disabled (native and EnvPool "
             "reset with their own)"))
    step_timeout: Optional[float] = field(default=300.0, metadata=check(
        gt=0, applies_if=("backend", "==", "async"),
        help="seconds one step of the async backend's environment processes may take before the one that has not "
             "answered is named and the rollout fails (null: no limit)"))
    timesteps_per_call: int = field(default=0, metadata=check(ge=0, help="0: whole episodes; >0: fragments, at least n_envs * timesteps_per_call transitions per rollout"))
    carry_episodes: bool = field(default=False, metadata={"help": (
        "whole episodes without restarting the environments each rollout: an episode still running when a "
        "rollout has its steps goes on in the next rollout (its first steps were sampled by the previous "
        "policy, as with SB3's n_steps), so no environment step is thrown away")})


# ------------------------------------------------------------------------------------------------ worker
def _warn_fresh(backend: str, why: str) -> None:
    """Say once per backend that a resumed worker starts fresh episodes."""
    if backend not in _warned_fresh_resume:
        _warned_fresh_resume.add(backend)
        logger.warning("corral: worker.backend=%s %s; the resumed run starts fresh episodes "
                       "(not the episodes an uninterrupted run would have sampled)", backend, why)


def _check_rollout_mode(carry_episodes: bool, timesteps_per_call: int) -> None:
    """Whole carried episodes and fragments are two answers: asking for both is one ConfigError."""
    if carry_episodes and timesteps_per_call > 0:
        raise ConfigError(f"worker.carry_episodes=true returns whole episodes but worker.timesteps_per_call="
                          f"{timesteps_per_call} returns fragments; set one of them")


def _warn_oversize(worker: "VectorWorker", got: int, wanted: int) -> None:
    """Say once per worker that its whole-episode rollouts are far larger than asked, and what to do."""
    if worker._warned_oversize:
        return
    worker._warned_oversize = True
    logger.warning(
        "corral: worker=vector returned %d steps where %d were asked for: every one of its %d environments "
        "records one whole episode from each rollout's restart, so an epoch is far larger than trainer.batch_size; "
        "set worker.carry_episodes=true (whole episodes, environments kept running) or lower worker.n_envs",
        got, wanted, worker.n_envs)


class VectorWorker(Worker):
    """Steps one VectorEnv of ``n_envs`` environments: one ``get_actions`` and one ``step`` call per step.

    ``rollout()`` returns one episode per environment slot; ``rollout(min_steps=m)`` whole episodes
    totalling at least ``m`` steps; ``rollout(n_episodes=n)`` exactly ``n`` episodes, ordered by the
    time they started (ties by slot), as ``worker=vec``. Every whole-episode rollout starts by
    resetting the VectorEnv; a slot whose episode ends starts another only while more steps (or
    episodes) are wanted, and the steps of a slot that records nothing are not counted.

    With ``timesteps_per_call > 0`` the worker returns fragments instead (as ``worker=fragment``):
    each rollout steps until it has recorded at least ``n_envs * timesteps_per_call`` transitions (the
    vector step that autoresets a slot under ``NEXT_STEP`` is not one), environments keep running
    across rollouts, and each fragment carries ``episode_infos["prior_length"]`` / ``["prior_return"]``.
    ``rollout(n_episodes=n)`` still returns ``n`` whole episodes (evaluation asks for those), starting
    every environment afresh.

    With ``carry_episodes`` (whole episodes only), ``rollout(min_steps=m)`` steps in fragments, as above,
    and keeps the steps of the episodes still running; it returns the episodes that ended, joined to their
    earlier steps, once they total at least ``m`` steps. Environments are not restarted for each rollout,
    so no slot steps idle waiting for the longest episode to end; an episode may span a policy update.
    """

    returns_fragments = False

    @classmethod
    def recording_problem(cls, worker_args: Mapping[str, Any]) -> str | None:
        """Why these settings cannot record videos (``native`` and ``envpool`` make every environment
        inside one VectorEnv, so none can be wrapped in a recorder), else None."""
        backend = str(worker_args.get("backend", "native"))
        return RECORDING_NEEDS_SYNC.format(backend=backend) if backend in ("native", "envpool") else None

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0, n_envs: int = 16,
                 backend: str = "native", num_threads: int = 0, autoreset_mode: str = "next_step",
                 step_timeout: float | None = 300.0, timesteps_per_call: int = 0, carry_episodes: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number,
                         n_envs=n_envs, **kwargs)
        check_backend(backend)
        if str(autoreset_mode).lower() not in AUTORESET_MODES:
            raise ConfigError(f"worker.autoreset_mode={autoreset_mode!r} is not one of {', '.join(AUTORESET_MODES)}")
        if timesteps_per_call < 0:
            raise ConfigError(f"worker.timesteps_per_call must be >= 0, got {timesteps_per_call}")
        _check_rollout_mode(bool(carry_episodes), int(timesteps_per_call))
        self.backend = backend
        self.num_threads = int(num_threads)
        self.autoreset_mode = str(autoreset_mode).lower()
        self.step_timeout = None if step_timeout is None else float(step_timeout)
        self.timesteps_per_call = int(timesteps_per_call)
        self.returns_fragments = self.timesteps_per_call > 0
        self.carry_episodes = bool(carry_episodes)
        self.venv: VectorEnv | None = None
        self._built: BuiltVectorEnv | None = None
        self._source: Any = None
        self._mode = AutoresetMode.NEXT_STEP
        self._log: StepLog | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None
        self._vseeded = False
        self._rollouts = 0  # rollouts since the VectorEnv was built (the fresh seed of a resume)
        self._limit_in_env = True
        #: Environment steps the VectorEnv took, recorded or not (a whole-episode rollout steps every slot
        #: until its last recorded episode ends; reset steps count too): recorded / this = the rollouts' yield.
        self.env_steps_taken = 0
        # Fragment mode: the running episodes (carried across rollouts).
        self._frag: dict[str, Any] | None = None
        # carry_episodes: the steps so far of the episodes still running.
        self._carry: RunningEpisodes | None = None
        #: Fragment mode: keep the per-step bookkeeping even where the after-the-loop one applies (tests
        #: compare the two).
        self._per_step_bookkeeping = False
        self._warned_oversize = False
        #: The shape of every batched observation, compared once per step call; None: not checked (a Dict space).
        self._obs_batch: tuple[int, ...] | None = None

    # ------------------------------------------------------------------ environments
    @property
    def _env_seed(self) -> int:
        """The one integer seed of backends without per-slot seeds: slot 0's environment stream."""
        return seed_int(child_seed(self.env_seeds[0], 0))

    def _build(self, source: Any, seed: int | None = None) -> None:
        if self.venv is not None:
            self.venv.close()
            self.venv = None
        built = build_vector_env(
            source, backend=self.backend, n_envs=self.n_envs, max_episode_length=self.max_episode_length,
            seed=self._env_seed if seed is None else seed, num_threads=self.num_threads,
            autoreset_mode=self.autoreset_mode, step_timeout=self.step_timeout)
        self._source, self._built, self.venv = source, built, built.venv
        self._vseeded = built.backend == "envpool"  # EnvPool is seeded when it is made
        self._rollouts = 0
        self._mode = autoreset_mode_of(built.venv)
        limit = min_limit(self.max_episode_length, built.own_limit)
        if limit is None:
            raise ConfigError("the environment has no time limit and max_episode_length is not set; "
                              "set env.max_episode_length (or max_episode_length= in Python)")
        self.episode_limit = limit
        # A cut the VectorEnv does not make itself leaves the slot running until its environment ends
        # the episode (NEXT_STEP/SAME_STEP), or resets it at once (DISABLED).
        self._limit_in_env = built.own_limit is not None and built.own_limit <= limit
        if not self._limit_in_env and self._mode != AutoresetMode.DISABLED and built.own_limit is None:
            raise ConfigError(
                "the VectorEnv has no time limit of its own, so a slot cut at max_episode_length could never "
                "restart; give the environment a time limit (max_episode_steps) or use autoreset mode DISABLED")
        obs_space, act_space = built.venv.single_observation_space, built.venv.single_action_space
        self._log = StepLog(self.n_envs, obs_space, act_space, capacity=limit + 1)
        self.env_source = source
        shape = observation_shape(obs_space)
        self._obs_batch = None if shape is None else (self.n_envs, *shape)
        self._clip = action_clipper(act_space)
        self._restart_episodes()

    def update_env(self, env_update: Any) -> None:
        """A new environment source (id, EnvFactory, env, callable making one, or a VectorEnv) builds a new
        VectorEnv; any other callable is applied to the current VectorEnv (a VectorEnv it returns replaces it)."""
        if env_update is None:
            return
        if isinstance(env_update, (str, EnvFactory, gym.Env, VectorEnv)) or (
            callable(env_update) and self.venv is None
        ):
            self._build(env_update)
            return
        if callable(env_update):
            result = env_update(self.venv)
            if isinstance(result, VectorEnv) and result is not self.venv:
                self._build(result)
            return
        raise ConfigError(f"env_update must be an environment source or a callable applied to the VectorEnv; "
                          f"got {type(env_update).__name__}")

    def _on_new_envs(self) -> None:  # the base class's per-slot environments are not used
        pass

    def _reset(self) -> np.ndarray:
        """Reset every environment; the first reset seeds them (one stream per slot where the backend
        takes a list of seeds)."""
        venv, built = self.venv, self._built
        assert venv is not None and built is not None
        if self._vseeded:
            obs, _ = venv.reset()
        else:
            self._vseeded = True
            if built.seed_list:
                # Sync/AsyncVectorEnv take one seed per slot (VectorEnv's annotation says int only).
                obs, _ = venv.reset(seed=[seed_int(child_seed(s, 0)) for s in self.env_seeds])  # type: ignore[arg-type]
            else:
                obs, _ = venv.reset(seed=self._env_seed)
        if getattr(obs, "shape", None) != self._obs_batch:
            self.check_batch(obs, "when its VectorEnv was reset")
        return obs

    def check_batch(self, obs: Any, where: str) -> None:
        """Raise :class:`~corral.framework.worker.ObservationMismatch` when ``obs``, a batched observation the
        VectorEnv returned ``where``, is not ``n_envs`` observations of its single observation space (the slow
        path of the check ``getattr(obs, "shape", None) != self._obs_batch`` after every step call)."""
        venv, expected = self.venv, self._obs_batch
        assert venv is not None
        if expected is None:
            return
        space = venv.single_observation_space
        shape = np.shape(obs) if isinstance(obs, np.ndarray) else None
        if shape is None:
            problem = f"a {type(obs).__name__} for a batch of {self.n_envs} observations"
        elif shape[:1] == expected[:1]:
            if shape == expected:
                return
            problem = f"observations of shape {shape[1:]}"
        else:
            problem = f"a batch of shape {shape} for {self.n_envs} environments"
        raise observation_mismatch(self._source, problem, space, where)

    def mismatch_behind(self, exc: BaseException) -> Exception | None:
        """The :class:`~corral.framework.worker.ObservationMismatch` behind ``exc``, raised while stepping or
        resetting the VectorEnv, when a sub-environment's observation did not fit the batch: a SyncVectorEnv
        keeps each one's last observation, an AsyncVectorEnv's process raises numpy's broadcast error. None
        when that is not what happened."""
        venv = self.venv
        if venv is None or self._obs_batch is None:
            return None
        space, inner = venv.single_observation_space, venv.unwrapped
        backend = self._built.backend if self._built is not None else self.backend
        for j, o in enumerate(getattr(inner, "_env_obs", None) or ()):
            if o is not None and (problem := observation_problem(o, space)) is not None:
                return observation_mismatch(self._source, problem, space,
                                            f"in slot {j} of worker.backend={backend}'s VectorEnv")
        found = _BROADCAST.fullmatch(str(exc))
        if found and isinstance(inner, gym.vector.AsyncVectorEnv) and found.group(2) == str(self._obs_batch[1:]):
            return observation_mismatch(self._source, f"an observation of shape {found.group(1)}", space,
                                        f"in one of worker.backend={backend}'s environment processes")
        return None

    # ------------------------------------------------------------------ sampling
    @_reports_lost_processes
    @_reports_observation_mismatch
    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Whole episodes (or, with ``timesteps_per_call``, fragments); see the class docstring."""
        if self.venv is None:
            raise ConfigError("the vector worker has no environment; call update_env(env) first")
        if self.agent is None:
            raise ConfigError("the worker has no agent; call update_agent(policy) first")
        self._rollouts += 1
        if self.timesteps_per_call and n_episodes is None:
            return self._rollout_fragments(self.timesteps_per_call)[0]
        if self.carry_episodes and min_steps is not None and n_episodes is None:
            return self._rollout_carried(int(min_steps))
        return self._rollout_episodes(min_steps, n_episodes)

    def _restart_episodes(self) -> None:
        """Forget the running episodes (fragments and carried steps): the next rollout resets every slot."""
        self._frag = None
        self._carry = None

    def _rollout_carried(self, min_steps: int) -> EpisodeBatch:
        """Whole episodes totalling at least ``min_steps`` steps, from fragment rollouts joined to the steps
        kept of the episodes they continue (``carry_episodes``)."""
        done: list[EpisodeBatch] = []
        n = 0
        while n < min_steps:
            per_env = max(1, -(-(min_steps - n) // self.n_envs))
            fragments, slots = self._rollout_fragments(per_env)
            complete, self._carry = join_fragments(self._carry, fragments, slots)
            if complete is not None:
                done.append(complete)
                n += len(complete)
        return EpisodeBatch.concatenate(*done)

    def _ended(self, end: np.ndarray, obs: np.ndarray, done: np.ndarray, info: Mapping[str, Any]) -> tuple[
            np.ndarray, np.ndarray]:
        """Slots of the episodes ending now and their last observations (the true final observation,
        which SAME_STEP moves into ``info["final_obs"]``)."""
        idx = np.flatnonzero(end)
        last = obs[idx]
        if self._mode == AutoresetMode.SAME_STEP:
            d = done[idx]
            if d.any():
                last[d] = np.stack(info["final_obs"][idx[d]])
        return idx, last

    def _rollout_episodes(self, min_steps: int | None, n_episodes: int | None) -> EpisodeBatch:
        venv, log, agent, clip, limit = self.venv, self._log, self.agent, self._clip, self.episode_limit
        assert venv is not None and log is not None and agent is not None and limit is not None
        k, step, batch = self.n_envs, venv.step, self._obs_batch
        if min_steps is None and n_episodes is None:
            n_episodes = k
        target = min_steps or 0
        log.reserve(limit + 1 + (-(-target // k) if n_episodes is None else 0))
        self._restart_episodes()  # whole-episode rollouts restart every environment

        obs = self._reset()
        n_first = k if n_episodes is None else min(k, n_episodes)
        rec = np.zeros(k, dtype=bool)  # the slot's current step belongs to a recorded episode
        rec[:n_first] = True
        pending = np.zeros(k, dtype=bool)  # the slot records the next episode its environment starts
        first_row = np.zeros(k, dtype=np.int64)  # log row of the slot's recorded episode's first step
        prev_done = np.zeros(k, dtype=bool)  # NEXT_STEP: the slot's next step is its reset step
        agent.reset(np.ones(k, dtype=bool))
        n_rec, n_pending, started, steps_taken, row = n_first, 0, n_first, 0, 0
        ep_slots: list[np.ndarray] = []
        ep_rows: list[np.ndarray] = []
        ep_lengths: list[np.ndarray] = []
        ep_term: list[np.ndarray] = []
        ep_last: list[np.ndarray] = []
        limit_in_env = self._limit_in_env
        while n_rec or n_pending:
            if row >= log.capacity:
                log.reserve(row + 1, keep=row)
            actions, infos = agent.get_actions(obs)
            log.write(row, obs, actions, infos)
            obs, rewards, term, trunc, info = step(clip(actions) if clip is not None else actions)
            if getattr(obs, "shape", None) != batch:  # one tuple comparison per step call
                self.check_batch(obs, "from a step of its VectorEnv")
            log.rewards[row] = rewards
            steps_taken += n_rec
            done = term | trunc
            row += 1  # rows written so far; a recorded episode's length is row - first_row
            if limit_in_env:
                end = done & rec
            else:
                end = rec & (done | (row - first_row >= limit))
            if end.any():
                idx, last = self._ended(end, obs, done, info)
                rows = first_row[idx]
                ep_slots.append(idx)
                ep_rows.append(rows)
                ep_lengths.append(row - rows)
                ep_term.append(term[idx])
                ep_last.append(last)
                rec[idx] = False
                n_rec -= len(idx)
                if n_episodes is not None:
                    more = idx[: max(0, n_episodes - started)]
                elif steps_taken < target:
                    more = idx
                else:
                    more = idx[:0]
                if len(more):
                    pending[more] = True
                    n_pending += len(more)
                    started += len(more)
            obs, restarted, prev_done = self._restarts(obs, done, end, prev_done)
            if n_pending:
                starting = pending & restarted
                if starting.any():
                    rec |= starting
                    pending &= ~starting
                    n = int(starting.sum())
                    n_rec += n
                    n_pending -= n
                    first_row[starting] = row
                    agent.reset(starting)
        self.env_steps_taken += row * k
        if min_steps and (got := int(sum(int(x.sum()) for x in ep_lengths))) > OVERSIZE_FACTOR * min_steps:
            _warn_oversize(self, got, int(min_steps))
        term = np.concatenate(ep_term)
        batch, slots = _gather(log, np.concatenate(ep_slots), np.concatenate(ep_rows), np.concatenate(ep_lengths),
                               np.zeros(len(term), dtype=np.int64),
                               np.where(term, StepType.TERMINAL, StepType.TIMEOUT).astype(np.uint8),
                               np.concatenate(ep_last), with_slots=True)
        if isinstance(self._source, RecordedEnvFactory):  # every slot records: say which episodes were taken
            batch.episode_infos[VIDEO_SLOT_INFO] = slots.astype(np.int64)
        return batch

    def _fragment_state(self) -> dict[str, Any]:
        """The running episodes carried across fragment rollouts (every environment reset on the first)."""
        if self._frag is None:
            self._carry = None
            k = self.n_envs
            obs = self._reset()
            assert self.agent is not None
            self.agent.reset(np.ones(k, dtype=bool))
            self._frag = {"obs": obs, "t": np.zeros(k, dtype=np.int64), "ret": np.zeros(k, dtype=np.float64),
                          "rec": np.ones(k, dtype=bool), "prev_done": np.zeros(k, dtype=bool)}
        return self._frag

    def _restarts(self, obs: np.ndarray, done: np.ndarray, end: np.ndarray,
                  prev_done: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """After a step: the slots whose next step starts a new episode, in each autoreset mode.

        DISABLED: the ended slots are reset now (their reset observations replace ``obs``); NEXT_STEP: the
        slots that ended one step ago (this step was their reset step); SAME_STEP: the slots that ended now.
        Returns ``(obs, restarted, prev_done)`` with ``prev_done`` carried to the next step."""
        if self._mode == AutoresetMode.DISABLED:
            restarted = done | end
            if restarted.any():
                assert self.venv is not None
                obs, _ = self.venv.reset(options={"reset_mask": restarted})
                if getattr(obs, "shape", None) != self._obs_batch:
                    self.check_batch(obs, "when its VectorEnv was reset")
            return obs, restarted, prev_done
        if self._mode == AutoresetMode.NEXT_STEP:
            return obs, prev_done, done
        return obs, done, prev_done

    def _rollout_fragments(self, per_env: int) -> tuple[EpisodeBatch, np.ndarray]:
        """At least ``n_envs * per_env`` transitions, as fragments of the running episodes, and the slot of
        each fragment.

        With NEXT_STEP autoreset and the time limit inside the VectorEnv (every built-in backend by
        default) the episode bookkeeping is done once, over the whole rollout, after the stepping loop;
        other modes keep per-step bookkeeping. Both give the same batches."""
        if self._mode == AutoresetMode.NEXT_STEP and self._limit_in_env and not self._per_step_bookkeeping:
            return self._rollout_fragments_next_step(per_env)
        return self._rollout_fragments_per_step(per_env)

    def _rollout_fragments_per_step(self, per_env: int) -> tuple[EpisodeBatch, np.ndarray]:
        venv, log, agent, clip, limit = self.venv, self._log, self.agent, self._clip, self.episode_limit
        assert venv is not None and log is not None and agent is not None and limit is not None
        k, step, target, batch = self.n_envs, venv.step, self.n_envs * per_env, self._obs_batch
        log.reserve(per_env + 1)
        s = self._fragment_state()
        obs, t, ret, rec, prev_done = s["obs"], s["t"], s["ret"], s["rec"], s["prev_done"]
        # The rollout's first row of each slot's piece, and what its episode had before the rollout.
        first_row = np.zeros(k, dtype=np.int64)
        prior_len, prior_ret = t.copy(), ret.copy()
        pieces: list[tuple[np.ndarray, ...]] = []
        recorded, row = 0, 0
        while recorded < target:
            if row >= log.capacity:
                log.reserve(row + 1, keep=row)
            recorded += int(rec.sum())
            actions, infos = agent.get_actions(obs)
            log.write(row, obs, actions, infos)
            obs, rewards, term, trunc, info = step(clip(actions) if clip is not None else actions)
            if getattr(obs, "shape", None) != batch:  # one tuple comparison per step call
                self.check_batch(obs, "from a step of its VectorEnv")
            log.rewards[row] = rewards
            t += rec
            ret += np.where(rec, rewards, 0.0)
            done = term | trunc
            end = rec & (done | (t >= limit))
            if end.any():
                idx, last = self._ended(end, obs, done, info)
                length = t[idx] - prior_len[idx]
                ends = np.where(term[idx], StepType.TERMINAL, StepType.TIMEOUT).astype(np.uint8)
                pieces.append((idx, first_row[idx], length, prior_len[idx], prior_ret[idx], ends, last))
                rec[idx] = False
            obs, restarted, prev_done = self._restarts(obs, done, end, prev_done)
            starting = ~rec & restarted
            if starting.any():
                rec |= starting
                t[starting] = 0
                ret[starting] = 0.0
                prior_len[starting] = 0
                prior_ret[starting] = 0.0
                first_row[starting] = row + 1
                agent.reset(starting)
            row += 1
        # Pieces still running at the end of the rollout: fragments whose last step is MID.
        running = rec & (t > prior_len)
        if running.any():
            idx = np.flatnonzero(running)
            pieces.append((idx, first_row[idx], t[idx] - prior_len[idx], prior_len[idx], prior_ret[idx],
                           np.full(len(idx), StepType.MID, dtype=np.uint8), obs[idx]))
        self.env_steps_taken += row * k
        self._frag = {"obs": np.array(obs, copy=True), "t": t, "ret": ret, "rec": rec, "prev_done": prev_done}
        slots, first, lengths, prior_len, prior_ret, last_type, last_obs = (np.concatenate(p) for p in zip(*pieces))
        return _gather(log, slots, first, lengths, prior_len, last_type, last_obs, prior_ret, with_slots=True)

    def _rollout_fragments_next_step(self, per_env: int) -> tuple[EpisodeBatch, np.ndarray]:
        """Fragments under NEXT_STEP autoreset with the time limit in the VectorEnv: the loop only steps,
        writes the step log and the done flags, and resets the agent's slots that start a new episode;
        episodes are cut out of the done flags afterwards.

        A slot's episode ends at a row where its done flag is set; its next row is the VectorEnv's reset
        step (not a transition: its recorded observation is the episode's final observation) and the row
        after that starts the next episode."""
        venv, log, agent, clip = self.venv, self._log, self.agent, self._clip
        assert venv is not None and log is not None and agent is not None
        k, step, target, batch = self.n_envs, venv.step, self.n_envs * per_env, self._obs_batch
        s = self._fragment_state()
        obs, t0, ret0, prev = s["obs"], s["t"], s["ret"], s["prev_done"]
        capacity = per_env + 2
        log.reserve(capacity)
        dones = np.zeros((log.capacity, k), dtype=bool)
        terms = np.zeros((log.capacity, k), dtype=bool)
        reset0 = prev.copy()  # row 0 is the reset step of these slots
        prev_any = bool(prev.any())
        recorded = row = 0
        while recorded < target:
            if row >= log.capacity:
                log.reserve(row + 1, keep=row)
                dones = np.concatenate([dones, np.zeros((log.capacity - len(dones), k), dtype=bool)])
                terms = np.concatenate([terms, np.zeros((log.capacity - len(terms), k), dtype=bool)])
            actions, infos = agent.get_actions(obs)
            log.write(row, obs, actions, infos)
            obs, rewards, term, trunc, _ = step(clip(actions) if clip is not None else actions)
            if getattr(obs, "shape", None) != batch:  # one tuple comparison per step call
                self.check_batch(obs, "from a step of its VectorEnv")
            log.rewards[row] = rewards
            done = term | trunc
            dones[row] = done
            terms[row] = term
            if prev_any:  # this step was those slots' reset step: their next step starts an episode
                recorded += k - int(prev.sum())
                agent.reset(prev)
            else:
                recorded += k
            prev, prev_any = done, bool(done.any())
            row += 1
        self.env_steps_taken += row * k
        dones, terms = dones[:row], terms[:row]
        # Slot-major views: reset rows are not transitions; a piece runs from a valid row that follows a
        # reset row (or row 0) to a row whose done flag is set (or the last row).
        resets = np.empty((k, row), dtype=bool)
        resets[:, 0] = reset0
        resets[:, 1:] = dones[:-1].T
        valid = ~resets
        starts = valid.copy()
        starts[:, 1:] &= resets[:, :-1]
        ends = valid & dones.T
        ends[:, -1] |= valid[:, -1]
        start_idx, end_idx = np.flatnonzero(starts), np.flatnonzero(ends)
        slots, first = np.divmod(start_idx, row)
        last = end_idx % row
        lengths = last - first + 1
        continuing = (first == 0) & ~reset0[slots]  # pieces that continue the episode running before
        prior_len = np.where(continuing, t0[slots], 0)
        prior_ret = np.where(continuing, ret0[slots], 0.0)
        ended = dones[last, slots]
        last_type = np.where(terms[last, slots], StepType.TERMINAL,
                             np.where(ended, StepType.TIMEOUT, StepType.MID)).astype(np.uint8)
        # An ended episode's final observation is what its reset row recorded (or, on the last row, the
        # observation the last step returned); a running fragment's is the last observation returned.
        nxt = np.minimum(last + 1, row - 1)
        last_obs = np.where((ended & (last + 1 < row)).reshape(-1, *([1] * (obs.ndim - 1))),
                            log.observations[nxt, slots], obs[slots])
        batch, batch_slots = _gather(log, slots, first, lengths, prior_len, last_type, last_obs, prior_ret,
                                     with_slots=True)
        # The running episodes carried to the next rollout; their returns are summed in step order from the
        # return carried in, as the per-step loop sums them.
        running = ~ended
        rs, rf = slots[running], first[running]
        t, ret = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.float64)
        t[rs] = prior_len[running] + lengths[running]
        summed = np.zeros((row + 1, k), dtype=np.float64)
        summed[0, rs] = prior_ret[running]
        in_piece = np.zeros((row, k), dtype=bool)
        in_piece[:, rs] = np.arange(row)[:, None] >= rf[None, :]
        summed[1:] = np.where(in_piece, log.rewards[:row], 0.0)
        ret[rs] = np.cumsum(summed, axis=0)[-1, rs]
        self._frag = {"obs": np.array(obs, copy=True), "t": t, "ret": ret, "rec": ~prev, "prev_done": prev}
        return batch, batch_slots

    # ------------------------------------------------------------------ updates, snapshots, shutdown
    def update_agent(self, agent_update: Any) -> None:
        """A new agent object starts fresh episodes (fragment mode); new parameters let them continue."""
        from corral.framework.policy import Policy

        if isinstance(agent_update, Policy):
            self._restart_episodes()
        super().update_agent(agent_update)

    def _rng_state(self) -> Any:
        venv, built = self.venv, self._built
        if venv is None or built is None or not built.restorable or not self._vseeded:
            return None
        if isinstance(venv, gym.vector.SyncVectorEnv):
            return [e.unwrapped.np_random.bit_generator.state for e in venv.envs]
        if isinstance(venv, gym.vector.AsyncVectorEnv):
            return [g.bit_generator.state for g in venv.get_attr("np_random")]
        rng = getattr(venv.unwrapped, "_np_random", None)
        return None if rng is None else rng.bit_generator.state

    def _set_rng_state(self, state: Any) -> None:
        def generator(s: Mapping[str, Any]) -> np.random.Generator:
            bitgen = getattr(np.random, s["bit_generator"])()
            bitgen.state = s
            return np.random.Generator(bitgen)

        venv = self.venv
        assert venv is not None
        if isinstance(venv, gym.vector.SyncVectorEnv):
            for env, s in zip(venv.envs, state):
                env.unwrapped.np_random = generator(s)
        elif isinstance(venv, gym.vector.AsyncVectorEnv):
            venv.set_attr("np_random", [generator(s) for s in state])
        else:
            venv.unwrapped.np_random = generator(state)

    @_reports_lost_processes
    def state_dict(self) -> dict[str, Any]:
        """The environments' RNG state (where the backend lets it be read), the agent's sampling state and,
        in fragment mode, the running episodes (the VectorEnv pickled, where it pickles) with, under
        ``carry_episodes``, the steps kept of each."""
        built = self._built
        restorable = built is not None and built.restorable
        state: dict[str, Any] = {
            "vector_backend": built.backend if built is not None else None,
            "restorable": restorable,
            "seeded": self._vseeded,
            "rollouts": self._rollouts,
            "env_rng": self._rng_state() if restorable else None,
            "agent": self.agent.get_sampling_state() if self.agent is not None else {},
            "fragments": None,
        }
        if self._frag is not None and restorable:
            try:
                state["fragments"] = pickle.dumps({"venv": self.venv, "frag": self._frag, "carry": self._carry})
            except Exception:  # noqa: BLE001 - a VectorEnv that does not pickle restarts its episodes
                state["fragments"] = None
                state["fragments_lost"] = True
        return state

    @_reports_lost_processes
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output. A backend whose environment state cannot be saved (EnvPool)
        starts fresh episodes from a new seed derived from the saved position, and says so once in the log."""
        if self.agent is not None:
            self.agent.set_sampling_state(state["agent"])
        if self.venv is None:
            return
        if state.get("restorable"):
            frag = state.get("fragments")
            if frag is not None:
                saved = pickle.loads(frag)
                self.venv.close()
                self.venv = saved["venv"]
                assert self._built is not None
                self._built.venv = self.venv
                self._frag = saved["frag"]
                self._carry = saved.get("carry")
            else:
                self._restart_episodes()
                if state.get("fragments_lost"):
                    _warn_fresh(f"{state.get('vector_backend')} (fragments)", "cannot save its running episodes")
            self._vseeded = bool(state["seeded"])
            self._rollouts = int(state.get("rollouts", 0))
            if state.get("env_rng") is not None:
                self._set_rng_state(state["env_rng"])
            return
        _warn_fresh(state.get("vector_backend") or self.backend, "cannot save its environments' state")
        rollouts = int(state.get("rollouts", 0))
        self._build(self._source, seed=seed_int(child_seed(self.env_seeds[0], 1, rollouts)))
        self._rollouts = rollouts

    def shutdown(self) -> None:
        """Close the VectorEnv (an async one whose environment processes are gone: end the others)."""
        if self.venv is not None:
            venv, self.venv = self.venv, None
            # A call left pending (a Ctrl-C while the worker waited for its environments' answers): its
            # pipes may hold half an answer, and waiting for the rest would fail or hang; end the processes.
            if str(getattr(getattr(venv, "_state", None), "value", "default")) != "default":
                _end_processes(venv)
            else:
                try:
                    venv.close()
                except (OSError, EOFError):  # a pipe to a killed environment process
                    _end_processes(venv)
        super().shutdown()


def _end_processes(venv: VectorEnv) -> None:
    """End an AsyncVectorEnv interrupted in the middle of a call, or whose close failed on the broken
    pipe of a killed environment process (its own close, even with ``terminate=True``, first waits
    for the pending call):
    terminate and join the others, close the pipes, and mark it closed so that its ``__del__`` does
    not try again."""
    processes = list(getattr(venv, "processes", ()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
    for pipe in getattr(venv, "parent_pipes", ()):
        if pipe is not None:
            pipe.close()
    venv.closed = True


def _rows(a: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """Rows ``flat`` of a time-major ``[row, slot, ...]`` array, indexed as one flat ``row * n_slots + slot``
    axis (``np.take`` on it is many times faster than fancy indexing with two index arrays)."""
    return np.take(a.reshape(-1, *a.shape[2:]), flat, axis=0)


def _gather(log: StepLog, slots: np.ndarray, first: np.ndarray, lengths: np.ndarray, prior_len: np.ndarray,
            last_type: np.ndarray, last_obs: np.ndarray, prior_ret: np.ndarray | None = None,
            with_slots: bool = False) -> Any:
    """An EpisodeBatch of episodes (or fragments) ordered by first row, then slot: piece ``i`` is slot
    ``slots[i]``'s log rows ``first[i] : first[i] + lengths[i]``. Its first step is FIRST when nothing of its
    episode came before (``prior_len`` 0), else MID; its last step is ``last_type`` (TERMINAL, TIMEOUT, or MID
    for a fragment still running, whose last step keeps its type). With ``prior_ret`` the pieces are
    fragments carrying ``episode_infos["prior_length"]`` / ``["prior_return"]``. With ``with_slots``, returns
    ``(batch, slot of each piece in batch order)``."""
    order = np.lexsort((slots, first))
    slots, first, lengths = slots[order], first[order], lengths[order].astype(np.int64)
    prior_len, last_type = prior_len[order], last_type[order]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    total = int(ends[-1])
    flat = (np.repeat(first, lengths) + (np.arange(total, dtype=np.int64) - np.repeat(starts, lengths))) * log.n_slots
    flat += np.repeat(slots, lengths)
    step_types = np.full(total, StepType.MID, dtype=np.uint8)
    step_types[starts] = np.where(prior_len == 0, StepType.FIRST, StepType.MID)
    cut = last_type != StepType.MID  # a running fragment's last step keeps its type (FIRST for a one-step piece)
    step_types[(ends - 1)[cut]] = last_type[cut]
    infos = {} if prior_ret is None else {"prior_length": prior_len.astype(np.int64),
                                          "prior_return": prior_ret[order].astype(np.float64)}
    batch = EpisodeBatch(
        observations=_rows(log.observations, flat),
        actions=_rows(log.actions, flat),
        rewards=_rows(log.rewards, flat),
        step_types=step_types,
        lengths=lengths,
        last_observations=np.asarray(last_obs[order], dtype=log.observations.dtype),
        agent_infos={key: _rows(v, flat) for key, v in log.agent_infos.items()},
        episode_infos=infos,
        allow_fragments=prior_ret is not None,
    )
    return (batch, slots) if with_slots else batch


def _check_sampler_can_start_processes(sampler: Any) -> None:
    """Raise the one-line :class:`ConfigError` for ``worker.backend=async`` when the chosen sampler option
    (``sampler``, the config's ``sampler`` node) runs its workers in daemon processes."""
    if sampler is None or not hasattr(sampler, "get") or sampler.get("name") is None:
        return
    from corral.framework.plugins import get_registry

    if runs_workers_in_daemon_processes(get_registry().get("sampler", sampler.name).factory):
        raise ConfigError(async_in_daemon_message(f"sampler={sampler.name}"))


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject ``worker=vector`` fragments (``worker.timesteps_per_call > 0``) for an algorithm that needs whole
    episodes, fragments together with ``carry_episodes``, an unknown backend, and ``worker.backend=async`` under a
    sampler whose workers run in daemon processes (one that declares
    :attr:`~corral.framework.sampler.Sampler.workers_in_daemon_processes`: they cannot start its environment
    processes), before anything starts (an option the backend would ignore, ``num_threads`` off EnvPool or
    ``autoreset_mode`` on native or EnvPool, is its field's ``applies_if``)."""
    worker = cfg.get("worker") if hasattr(cfg, "get") else None
    if worker is None or worker.get("name") != "vector":
        return
    backend = worker.get("backend", "native")
    check_backend(backend)
    if backend == "async":
        _check_sampler_can_start_processes(cfg.get("sampler"))
        check_room_for_async_envs(int(worker.get("n_envs", 1)))
    trainer: Any = cfg.get("trainer") or {}
    if trainer.get("video_every", 0) and trainer.get("eval_every", 0) and (
            why := VectorWorker.recording_problem({"backend": backend})):
        raise ConfigError(f"trainer.video_every={trainer.video_every}: {why}")
    if backend in ("native", "envpool") and cfg.get("env") is not None:
        from corral.framework.compose import env_source

        check_source(env_source(cfg.env), backend, f"env={cfg.env.name}")
    _check_rollout_mode(bool(worker.get("carry_episodes", False)), int(worker.get("timesteps_per_call", 0) or 0))
    if int(worker.get("timesteps_per_call", 0) or 0) > 0 and cfg.get("algo") is not None:
        from corral.framework.plugins import get_registry

        factory = get_registry().get("algo", cfg.algo.name).factory
        algo = getattr(factory, "component_class", factory)
        if not getattr(algo, "accepts_fragments", False):
            raise ConfigError(f"algo={cfg.algo.name} needs whole episodes, but worker=vector with "
                              f"worker.timesteps_per_call={worker.timesteps_per_call} returns fragments; "
                              "set worker.timesteps_per_call=0 (and worker.carry_episodes=true to keep the "
                              "environments running across rollouts)")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=vector``."""
    register("worker", "vector", VectorWorker, config=VectorWorkerConfig,
             help="one gymnasium VectorEnv per worker (backend: native, envpool, sync, async), one step call per step")
