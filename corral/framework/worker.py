"""Worker (the thing that steps environments with an agent) and WorkerFactory (how to build one anywhere)."""

from __future__ import annotations

import copy
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np

from corral.framework.batch import EpisodeBatch
from corral.framework.env import (
    as_seed_sequence,
    child_seed,
    env_rng_state,
    env_task_state,
    is_new_env,
    make_env,
    restore_env_task,
    seed_int,
    set_env_rng_state,
)
from corral.framework.errors import ConfigError, WorkerError
from corral.framework.interrupts import raised_by_signal_handler
from corral.framework.policy import Policy


class ObservationMismatch(ValueError):
    """An environment returned an observation that does not fit its ``observation_space``: another shape,
    or no array of numbers at all. Workers check every observation's shape as they get it (one tuple
    comparison per step), so this names the environment and the step instead of failing later in the
    policy or a buffer. Not a CorralError: every sampler reports it as a worker's failure (``worker 0
    raised ObservationMismatch: ...``), without a traceback (its message says where)."""


#: Spaces whose observations are arrays of ``space.shape``: the ones workers check.
_CHECKED_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
#: Exceptions corral raises in a worker on purpose, whose message says all: reported without the worker's
#: traceback (which would show only corral's own frames).
_SELF_EXPLAINED = (ObservationMismatch.__name__,)


def observation_shape(space: gym.Space) -> tuple[int, ...] | None:
    """The shape of every observation of ``space``, which workers compare each step's observation's
    ``shape`` with; None for a space whose values are not arrays (Dict, Tuple, Text): those are not checked."""
    return tuple(space.shape) if isinstance(space, _CHECKED_SPACES) and space.shape is not None else None


def observation_problem(obs: Any, space: gym.Space) -> str | None:
    """What makes ``obs`` no observation of ``space`` (``"an observation of shape (5,)"``, ``"a dict"``,
    ``"an observation of dtype <U8"``); None when it fits, or the space is not checked. The slow path of
    the per-step check, taken only when an observation's ``shape`` differs (or it has none: a list, an int)."""
    shape = observation_shape(space)
    if shape is None:
        return None
    if obs is None or isinstance(obs, (dict, str, bytes)):
        return "None" if obs is None else f"a {type(obs).__name__}"
    try:
        arr = np.asarray(obs)
    except ValueError:  # a ragged list
        return f"a {type(obs).__name__} that is no array"
    if arr.shape != shape:
        return f"an observation of shape {arr.shape}"
    if arr.dtype.kind not in "biuf":
        return f"an observation of dtype {arr.dtype}"
    return None


def space_text(space: gym.Space) -> str:
    """``repr(space)``, or for a long one (a Box with bounds per element) its kind, shape and dtype."""
    text = repr(space)
    if len(text) <= 100:
        return text
    return f"{type(space).__name__} of shape {space.shape} and dtype {space.dtype}"


def observation_mismatch(env: Any, problem: str, space: gym.Space, where: str) -> ObservationMismatch:
    """The :class:`ObservationMismatch` of environment ``env`` (its source: an EnvFactory, an id...) that
    returned ``problem`` (:func:`observation_problem`) ``where`` (``"at step 10 of an episode"``)."""
    return ObservationMismatch(
        f"the environment {env!r} returned {problem} {where}, but its observation_space is {space_text(space)}; "
        "fix the environment, or its observation_space (a wrapper that changes observations must change "
        "the space too)")


class Worker(ABC):
    """Steps ``n_envs`` environments with one agent and returns whole episodes.

    Seeds: a worker gets one ``SeedSequence``; environment slot ``j`` gets its child ``j`` (or
    ``env_seeds[j]`` when given). A slot's environment is seeded on its first reset with child 0
    of that stream, and the agent's exploration noise for the slot comes from child 1.
    """

    #: True for workers whose episodes may end in a MID step (cut at a batch boundary).
    returns_fragments: bool = False
    #: True for workers that set their environments' tasks themselves (the trial-running workers of
    #: :mod:`corral.meta.trial_tasks`): from the algorithm's task schedules, or a new draw per trial,
    #: never the run's one task, so ``env.task_seed`` does not apply (its ``applies_if`` names every
    #: worker option whose class sets this, a plugin's too).
    sets_tasks: bool = False

    def __init__(
        self,
        *,
        seed: int | np.random.SeedSequence | None,
        max_episode_length: int | None,
        worker_number: int = 0,
        n_envs: int = 1,
        env_seeds: Sequence[np.random.SeedSequence] | None = None,
    ) -> None:
        if n_envs < 1:
            raise ConfigError(f"worker.n_envs must be >= 1, got {n_envs}")
        self.seed = as_seed_sequence(seed)
        self.max_episode_length = max_episode_length
        self.worker_number = worker_number
        self.n_envs = n_envs
        if env_seeds is not None and len(env_seeds) != n_envs:
            raise ConfigError(f"env_seeds has {len(env_seeds)} entries, expected n_envs={n_envs}")
        self.env_seeds = list(env_seeds) if env_seeds is not None else [child_seed(self.seed, j) for j in range(n_envs)]
        self.agent: Policy | None = None
        self.envs: list[gym.Env] = []
        self._seeded = [False] * n_envs
        self.episode_limit: int | None = None
        #: What the environments were made from (named by errors about them).
        self.env_source: Any = None
        #: The shape of every observation (:func:`observation_shape`); the workers compare each step's
        #: observation's ``getattr(obs, "shape", ())`` with it and call :meth:`check_observation` on a difference.
        self.obs_shape: tuple[int, ...] | None = None

    # ------------------------------------------------------------------ updates
    @property
    def action_seeds(self) -> list[np.random.SeedSequence]:
        """Noise stream of each environment slot."""
        return [child_seed(s, 1) for s in self.env_seeds]

    def update_agent(self, agent_update: Any) -> None:
        """Take a new agent (a Policy) or new parameters for the current one (None: no change)."""
        if agent_update is None:
            return
        if isinstance(agent_update, Policy):
            self.agent = agent_update
            self.agent.seed(self.action_seeds)
        elif self.agent is None and hasattr(agent_update, "get_actions"):
            kind = type(agent_update)
            raise ConfigError(
                f"worker {self.worker_number} was given an agent of type {kind.__module__}.{kind.__qualname__}, "
                "which is not a corral.Policy; subclass corral.Policy (get_actions, reset, get_param_values, "
                "set_param_values) so workers can seed it and update its parameters"
            )
        elif self.agent is None:
            raise ConfigError(
                f"worker {self.worker_number} received parameters before it had an agent; "
                "give the sampler a Policy first (agents=policy)"
            )
        else:
            self.agent.set_param_values(agent_update)

    def update_env(self, env_update: Any) -> None:
        """Take a new environment (Env or EnvFactory) or apply a callable to the current ones."""
        if env_update is None:
            return
        if is_new_env(env_update):
            for env in self.envs:
                env.close()
            self.envs = [make_env(env_update) for _ in range(self.n_envs)]
            self.env_source = env_update
            self._seeded = [False] * self.n_envs
            self._on_new_envs()
        elif callable(env_update):
            replaced = False
            for j, env in enumerate(self.envs):
                result = env_update(env)
                if isinstance(result, gym.Env) and result is not env:
                    self.envs[j] = result
                    self._seeded[j] = False
                    replaced = True
            if replaced:
                self._on_new_envs()
        else:
            raise ConfigError(
                f"env_update must be a gymnasium.Env, an EnvFactory or a callable applied to the "
                f"environment; got {type(env_update).__name__}"
            )

    def _on_new_envs(self) -> None:
        """Recompute what depends on the environments (episode limit, buffers)."""
        own = getattr(getattr(self.envs[0], "spec", None), "max_episode_steps", None)
        limits = [x for x in (self.max_episode_length, own) if x]
        if not limits:
            raise ConfigError(
                "the environment has no time limit and max_episode_length is not set; "
                "set env.max_episode_length (or max_episode_length= in Python)"
            )
        self.episode_limit = int(min(limits))
        # () for a space that is not checked: its observations (dicts, tuples) have no shape, so getattr's
        # default matches; an array observation of such a space takes the slow path, which accepts it.
        shape = observation_shape(self.envs[0].observation_space)
        self.obs_shape = () if shape is None else shape

    def check_observation(self, obs: Any, step: int, j: int = 0) -> None:
        """Raise :class:`ObservationMismatch` when ``obs``, returned by slot ``j``'s environment at ``step``
        of an episode (0: by its reset), is no observation of its ``observation_space``. The slow path of
        the workers' per-step check ``getattr(obs, "shape", ()) != self.obs_shape``."""
        env = self.envs[j]
        problem = observation_problem(obs, env.observation_space)
        if problem is not None:
            where = f"at step {step} of an episode" if step else "when it was reset"
            source = self.env_source if self.env_source is not None else env
            raise observation_mismatch(source, problem, env.observation_space, where)

    def reset_env(self, j: int, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset slot ``j`` (with ``options``, when given): the first reset of a slot seeds its environment.
        The observation is checked (:meth:`check_observation`)."""
        kwargs: dict[str, Any] = {} if options is None else {"options": options}
        if not self._seeded[j]:
            self._seeded[j] = True
            kwargs["seed"] = seed_int(child_seed(self.env_seeds[j], 0))
        obs, info = self.envs[j].reset(**kwargs)
        if getattr(obs, "shape", ()) != self.obs_shape:
            self.check_observation(obs, 0, j)
        return obs, info

    # ------------------------------------------------------------------ sampling
    @abstractmethod
    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Collect whole episodes: ``n_episodes`` of them, or at least ``min_steps`` steps' worth,
        or (neither given) the worker's natural unit (one episode per environment slot)."""

    def start_episode(self) -> None:
        """Begin a new episode (step-by-step API)."""
        raise NotImplementedError(f"{type(self).__name__} has no step-by-step API")

    def step_episode(self) -> bool:
        """Take one step; return True when the episode is over."""
        raise NotImplementedError(f"{type(self).__name__} has no step-by-step API")

    def collect_episode(self) -> EpisodeBatch:
        """Return the episode built by start_episode/step_episode."""
        raise NotImplementedError(f"{type(self).__name__} has no step-by-step API")

    def shutdown(self) -> None:
        """Close the environments."""
        for env in self.envs:
            env.close()
        self.envs = []

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue sampling exactly: RNG states, noise counters and
        each task environment's current task (see :func:`~corral.framework.env.env_task_state`)."""
        return {
            "seeded": list(self._seeded),
            "env_rng": [env_rng_state(e) for e in self.envs],
            "env_task": [copy.deepcopy(env_task_state(e)) for e in self.envs],
            "agent": self.agent.get_sampling_state() if self.agent is not None else {},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (environments and agent must already be set)."""
        self._seeded = list(state["seeded"])
        for env, rng in zip(self.envs, state["env_rng"]):
            set_env_rng_state(env, rng)
        for env, task in zip(self.envs, state.get("env_task", [])):
            restore_env_task(env, copy.deepcopy(task))
        if self.agent is not None:
            self.agent.set_sampling_state(state["agent"])


class UpdateFailure(Exception):
    """An agent or environment update raised inside a worker (see :func:`apply_updates`).

    Holds only strings and a flag, so it pickles across processes and Ray: ``stage`` ("agent update"
    or "environment update"), ``summary`` (``"TypeName: message"`` of the original exception),
    ``missing_module`` (the module name when the original was a ``ModuleNotFoundError``) and
    ``config_error`` (the original was a :class:`~corral.framework.errors.ConfigError`: a setting the
    worker cannot run with, whose message already says what to change).
    """

    def __init__(self, stage: str, summary: str, missing_module: str | None = None,
                 config_error: bool = False) -> None:
        super().__init__(stage, summary, missing_module, config_error)
        self.stage = stage
        self.summary = summary
        self.missing_module = missing_module
        self.config_error = config_error

    @classmethod
    def of(cls, stage: str, exc: BaseException) -> "UpdateFailure":
        """The failure of ``stage`` that raised ``exc``."""
        return cls(stage, exception_summary(exc), missing_module_of(exc), isinstance(exc, ConfigError))

    def __str__(self) -> str:
        return f"{self.stage} failed: {self.summary}"


def exception_summary(exc: BaseException) -> str:
    """``"TypeName: message"`` of an exception, on one line (at most 500 characters)."""
    text = " ".join(str(exc).split())
    if len(text) > 500:
        text = text[:497] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def worker_raised(worker_number: int, summary: str, activity: str, remote_traceback: str | None,
                  pid: int | None = None) -> WorkerError:
    """The :class:`~corral.framework.errors.WorkerError` of a worker whose ``activity``
    (``"sampling (obtain_samples)"``) raised: ``worker 0 (pid 4242) raised EnvironmentFailure: ...
    while sampling (obtain_samples)`` (no pid for a worker in the sampler's own process), with the
    worker's traceback. Every sampler's words for it."""
    who = f"worker {worker_number}" + (f" (pid {pid})" if pid is not None else "")
    if summary.split(":", 1)[0] in _SELF_EXPLAINED:  # corral's own check: its message says where
        remote_traceback = None
    return WorkerError(f"{who} raised {summary} while {activity}", worker_number=worker_number,
                       remote_traceback=remote_traceback)


def raised_in_worker(worker_number: int, exc: BaseException, activity: str) -> WorkerError:
    """:func:`worker_raised` for a worker in the sampler's own process whose ``activity`` raised
    ``exc``, with the traceback from the sampler's call down to where it raised. Raise it ``from exc``."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return worker_raised(worker_number, exception_summary(exc), activity, tb)


def missing_module_of(exc: BaseException) -> str | None:
    """The module name when ``exc`` (or an exception it was raised from) is a ModuleNotFoundError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError):
            return current.name or str(current)
        current = current.__cause__ or current.__context__
    return None


def apply_updates(worker: Worker, env_update: Any, agent_update: Any) -> None:
    """Every sampler's way to update a worker: ``update_env`` then ``update_agent``.

    A failure raises :class:`UpdateFailure` naming the update that failed, which each sampler turns
    into the same :class:`~corral.framework.errors.WorkerError` (:func:`update_error`) before it
    samples anything with that worker.
    """
    for stage, apply, update in (("environment update", worker.update_env, env_update),
                                 ("agent update", worker.update_agent, agent_update)):
        try:
            apply(update)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported as an UpdateFailure with the original's summary
            if isinstance(exc, SystemExit) and raised_by_signal_handler(exc):
                raise  # a signal handler's way to end the process (submitit's requeue), not the update's failure
            raise UpdateFailure.of(stage, exc) from exc


_UPDATE_HINTS = {
    "agent update": "an agent update must be a corral.Policy or parameters from the same policy's "
                    "get_param_values() (same names and shapes)",
    # An update of the wrong kind is a ConfigError of its own (Worker.update_env): what raised here is the
    # environment being made, or the callable applied to it.
    "environment update": "making the environment, or applying the update to it, raised it: check the "
                          "environment, env.kwargs and the update",
}


def update_error(sampler: str, worker_number: int | None, failure: UpdateFailure,
                 remote_traceback: str | None = None) -> WorkerError:
    """The WorkerError every sampler raises when a worker could not apply an update; nothing was
    sampled with it. ``sampler`` names the sampler (``"local"``, ``"ray"``...)."""
    who = f"worker {worker_number}" if worker_number is not None else "the server's policy"
    if failure.config_error:  # the setting is the problem, and its message says what to change: one line
        message = failure.summary.split(": ", 1)[-1]
        return WorkerError(f"{sampler} sampler: {who} could not apply the {failure.stage}: {message}",
                           worker_number=worker_number)
    if failure.missing_module:
        return WorkerError(
            f"{sampler} sampler: {who} could not apply the {failure.stage}: it cannot import module "
            f"{failure.missing_module!r} ({failure.summary}). The class is defined in a module that this "
            f"worker's Python cannot import; {import_fix(sampler)}",
            worker_number=worker_number, remote_traceback=remote_traceback,
        )
    return WorkerError(
        f"{sampler} sampler: {who} could not apply the {failure.stage}: {failure.summary}; nothing was sampled "
        f"with it ({_UPDATE_HINTS.get(failure.stage, 'check the update')})",
        worker_number=worker_number, remote_traceback=remote_traceback,
    )


def import_fix(sampler: str) -> str:
    """How to make a script's own module importable where ``sampler``'s workers run."""
    if sampler == "ray":
        return ("ship it to every Ray worker with sampler.runtime_env (e.g. sampler.runtime_env.working_dir=. "
                "or sampler.runtime_env.py_modules=[path/to/module]), or install it on every node")
    return "define the class in an importable module (not in __main__ or a notebook cell), or install it"


@dataclass
class WorkerFactory:
    """Picklable recipe for the workers of a sampler; ``factory(i)`` builds worker ``i`` where it runs.

    Worker ``i`` is seeded with child ``i`` of ``SeedSequence(seed)``; a restarted worker gets
    child ``(i, restart)`` so its stream moves on instead of repeating.
    """

    seed: int | None = None
    max_episode_length: int | None = None
    n_workers: int = 1
    worker_class: type[Worker] | None = None
    worker_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_workers < 1:
            raise ConfigError(f"n_workers must be >= 1, got {self.n_workers}")
        if self.seed is None:
            self.seed = int(np.random.SeedSequence().generate_state(1, np.uint32)[0])
        if self.worker_class is None:
            from corral.framework.plugins import get_registry

            self.worker_class = get_registry().get("worker", "default").factory
        self.worker_args = dict(self.worker_args or {})

    @property
    def root_seed(self) -> np.random.SeedSequence:
        """The seed sequence every worker's stream descends from."""
        return np.random.SeedSequence(self.seed)

    def worker_seed(self, worker_number: int, restart: int = 0) -> np.random.SeedSequence:
        """Seed stream of worker ``worker_number`` after ``restart`` restarts."""
        if restart:
            return child_seed(self.root_seed, worker_number, restart)
        return child_seed(self.root_seed, worker_number)

    def __call__(self, worker_number: int, restart: int = 0) -> Worker:
        """Build worker ``worker_number``."""
        if not 0 <= worker_number < self.n_workers:
            raise ValueError(f"worker number {worker_number} out of range for {self.n_workers} workers")
        assert self.worker_class is not None
        return self.worker_class(
            seed=self.worker_seed(worker_number, restart),
            max_episode_length=self.max_episode_length,
            worker_number=worker_number,
            **self.worker_args,
        )

    def prepare_worker_messages(self, objs: Any, preprocess: Callable[[Any], Any] = copy.deepcopy) -> list[Any]:
        """Spread ``objs`` over the workers: a list of exactly ``n_workers`` items is one per
        worker; anything else is broadcast (``preprocess``-ed once per worker)."""
        if isinstance(objs, list):
            if len(objs) != self.n_workers:
                raise ConfigError(
                    f"a list of {len(objs)} updates was given for {self.n_workers} workers; a list must "
                    "have exactly one item per worker (or pass a single object to broadcast it)"
                )
            return objs
        return [preprocess(objs) for _ in range(self.n_workers)]


__all__ = ["ObservationMismatch", "UpdateFailure", "Worker", "WorkerFactory", "apply_updates", "exception_summary",
           "missing_module_of", "observation_mismatch", "observation_problem", "observation_shape", "raised_in_worker",
           "space_text", "update_error", "worker_raised"]
