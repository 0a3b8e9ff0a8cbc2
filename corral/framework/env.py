"""EnvSpec and the adaptation of gymnasium environments: building, copying, seeding, RNG state."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from corral.framework.errors import ConfigError
from corral.framework.mujoco_warnings import route_mujoco_warnings


@dataclass(frozen=True)
class EnvSpec:
    """What a policy and a worker need to know about an environment."""

    observation_space: gym.Space
    action_space: gym.Space
    max_episode_length: int | None = None

    @classmethod
    def from_env(cls, env: gym.Env, max_episode_length: int | None = None) -> "EnvSpec":
        """Read the spaces of ``env``; the episode limit is the smaller of ``max_episode_length``
        and the environment's own ``TimeLimit`` (``env.spec.max_episode_steps``)."""
        own = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        limits = [x for x in (max_episode_length, own) if x]
        # A VectorEnv (a plugin environment may make one for worker=vector): its single spaces.
        obs_space = getattr(env, "single_observation_space", None) or env.observation_space
        act_space = getattr(env, "single_action_space", None) or env.action_space
        return cls(obs_space, act_space, min(limits) if limits else None)

    @property
    def is_discrete(self) -> bool:
        """True when actions are integers from a ``Discrete`` space."""
        return isinstance(self.action_space, gym.spaces.Discrete)


def silence_gymnasium_deprecations() -> None:
    """Leave gymnasium's deprecation warnings unprinted in this process from now on, as in the
    process that runs ``train.py``'s job (Python's default filter ignores a DeprecationWarning):
    a worker process (or Ray actor) making ``CartPole-v0`` printed gymnasium's two-line ``The
    environment CartPole-v0 is out of date`` each, in ANSI colour, which the run itself does not.
    gymnasium shows them through a filter it adds when :mod:`gymnasium.logger` is first imported,
    ahead of Python's; so it is imported first, and this filter goes ahead of it."""
    import warnings

    import gymnasium.logger  # noqa: F401 - adds gymnasium's filter now, not after (ahead of) this one

    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"^gymnasium\.")


def limit_above_time_limit(env: gym.Env, max_episode_length: int | None) -> str | None:
    """The warning for a ``max_episode_length`` above ``env``'s own ``TimeLimit``, which ends its
    episodes first (so the value asked for would do nothing); None when it is not above."""
    own = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    if not max_episode_length or not own or int(max_episode_length) <= int(own):
        return None
    env_id = getattr(getattr(env, "spec", None), "id", None) or type(env).__name__
    return (f"corral: env.max_episode_length={max_episode_length} is above {env_id}'s own time limit of {own} steps, "
            f"which ends its episodes first; for longer episodes raise that limit too with "
            f"env.kwargs.max_episode_steps={max_episode_length} (gymnasium.make's argument)")


def gym_spec(env_id: str) -> Any:
    """gymnasium's spec of ``env_id``; a ``module:id`` (as ``gymnasium.make`` takes) imports ``module``
    first, which registers the id. Raises ``gymnasium.error.Error`` for an id gymnasium does not know
    and for a module that does not import."""
    import importlib

    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise gym.error.Error(f"{module!r} cannot be imported ({exc}), so it registers no id") from exc
    return gym.spec(env_id)


def import_entry_point(env_id: str) -> None:
    """Import the module of ``env_id``'s entry point, as ``gymnasium.make`` would. Raises
    ``gymnasium.error.Error`` for an unknown id and for a module that needs a missing extra."""
    from gymnasium.envs.registration import load_env_creator

    spec = gym_spec(env_id)
    if isinstance(spec.entry_point, str):
        load_env_creator(spec.entry_point)


def before_making(env_id: str) -> None:
    """Import the module of ``env_id``'s entry point, as ``gymnasium.make`` is about to, and when that
    brought MuJoCo in, route MuJoCo's warnings to corral's log before the model is compiled
    (:mod:`corral.framework.mujoco_warnings`). An id that cannot be made is left to ``gymnasium.make``,
    which says why."""
    try:
        import_entry_point(env_id)
    except (gym.error.Error, ImportError):
        return
    route_mujoco_warnings()


def cannot_make_message(env_id: str, why: BaseException) -> str:
    """The one line for a gymnasium id that cannot be made (unknown, or its extra not installed)."""
    return (f"gymnasium cannot make environment {env_id!r}: {str(why).strip().rstrip('.')}. Check env.id (any "
            "registered gymnasium id works, e.g. env=gym env.id=Acrobot-v1).")


#: ``gymnasium.make``'s own keyword arguments (the others go to the environment's constructor).
MAKE_KWARGS = ("max_episode_steps", "disable_env_checker")


def unexpected_kwargs(creator: Callable[..., Any], kwargs: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The keys of ``kwargs`` that ``creator`` (a class or a function) does not take, and the names it
    does take; ``([], [])`` when it takes ``**kwargs`` or its signature cannot be read."""
    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return [], []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return [], []
    names = [p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                      inspect.Parameter.KEYWORD_ONLY)]
    return [k for k in kwargs if k not in names], names


def check_env_id(env_id: str) -> None:
    """Raise the one-line :class:`ConfigError` that making ``env_id`` would end in, without making
    it: an id gymnasium does not know (with its "did you mean"), a ``module:id`` whose module does not
    import, or an environment whose module does not import (a missing extra: MuJoCo, Box2D)."""
    try:
        import_entry_point(env_id)
    except (gym.error.Error, ImportError) as exc:  # ImportError: a module the environment's module needs
        raise ConfigError(cannot_make_message(env_id, exc)) from None


@dataclass
class EnvFactory:
    """A small, picklable recipe for an environment: ``EnvFactory("CartPole-v1")()`` makes one.

    This, not a live environment, is what travels to worker processes and nodes. ``fn`` may be a
    gymnasium id or a module-level callable returning a ``gymnasium.Env``.
    """

    fn: str | Callable[..., gym.Env]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raise the one-line :class:`ConfigError` that making this environment would end in, without
        making it: an id that cannot be made (:func:`check_env_id`), or an ``env.kwargs`` key that its
        constructor does not take. A constructor that takes ``**kwargs`` (MuJoCo's) says which it takes
        only when called: one environment is made and closed to find out; any other error in making it
        is left to the run, which reports it."""
        if isinstance(self.fn, str):
            check_env_id(self.fn)
        if self._check_kwargs():
            return
        try:
            env = self()
        except ConfigError:
            raise
        except Exception:  # noqa: BLE001 - not a keyword it refuses: making it in the run says what it is
            return
        env.close()

    def _check_kwargs(self) -> bool:
        """Raise for an ``env.kwargs`` key the constructor's signature does not take; False when the
        signature cannot say (it takes ``**kwargs``, or it cannot be read), True otherwise."""
        if not self.kwargs:
            return True
        creator: Any = self.fn
        kwargs = dict(self.kwargs)
        if isinstance(self.fn, str):
            from gymnasium.envs.registration import load_env_creator

            try:
                spec = gym_spec(self.fn)
                creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
            except (gym.error.Error, ImportError):
                return True  # gymnasium.make says why
            kwargs = {k: v for k, v in kwargs.items() if k not in MAKE_KWARGS}
            if not kwargs:
                return True
        unknown, takes = unexpected_kwargs(creator, kwargs)
        if not unknown and not takes:
            return False
        if unknown:
            name = getattr(creator, "__qualname__", repr(creator))
            raise ConfigError(
                f"environment {self!r} does not take the keyword argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}: {name} takes {', '.join(takes) or 'none'}"
                f"{' (and gymnasium.make: ' + ', '.join(MAKE_KWARGS) + ')' if isinstance(self.fn, str) else ''}; "
                "check env.kwargs")
        return True

    def __call__(self) -> gym.Env:
        """Build a fresh environment."""
        self._check_kwargs()
        try:
            if isinstance(self.fn, str):
                try:
                    before_making(self.fn)
                    return gym.make(self.fn, **dict(self.kwargs))
                except gym.error.Error as exc:
                    raise ConfigError(cannot_make_message(self.fn, exc)) from exc
                except ModuleNotFoundError:  # the module of a module:id, or one the environment imports
                    try:
                        gym_spec(self.fn)
                    except gym.error.Error as unknown:  # the id's module: the line check_env_id gives
                        raise ConfigError(cannot_make_message(self.fn, unknown)) from None
                    raise  # the environment's own import: its own error
            return self.fn(**dict(self.kwargs))
        except TypeError as exc:
            # A keyword the environment does not take (env.kwargs): one line naming it, not a traceback.
            why = str(exc.__cause__ or exc).split(" was raised from the environment creator", 1)[0]
            if not self.kwargs or "unexpected keyword argument" not in why:
                raise
            raise ConfigError(f"environment {self!r} does not take these keyword arguments: {why}; "
                              "check env.kwargs") from exc

    def __repr__(self) -> str:
        name = self.fn if isinstance(self.fn, str) else getattr(self.fn, "__qualname__", repr(self.fn))
        return f"EnvFactory({name!r}, kwargs={dict(self.kwargs)})"


def make_env(source: gym.Env | EnvFactory | Callable[[], gym.Env]) -> gym.Env:
    """A fresh environment from ``source``: a factory is called, a live environment is deep-copied."""
    if isinstance(source, gym.Env):
        return copy.deepcopy(source)
    if callable(source):
        env = source()
        if not isinstance(env, (gym.Env, gym.vector.VectorEnv)):  # a VectorEnv is for worker=vector
            raise ConfigError(f"environment factory {source!r} returned {type(env).__name__}, not a gymnasium.Env")
        return env
    raise ConfigError(f"expected a gymnasium.Env or an environment factory, got {type(source).__name__}")


def is_new_env(update: object) -> bool:
    """True when an ``env_update`` replaces the environment (rather than being applied to it)."""
    return isinstance(update, (gym.Env, EnvFactory))


def env_rng_state(env: gym.Env) -> dict[str, Any] | None:
    """The bit-generator state of ``env.np_random`` (None if the env was never seeded)."""
    rng = getattr(env.unwrapped, "_np_random", None)
    if rng is None:
        return None
    return copy.deepcopy(rng.bit_generator.state)


def set_env_rng_state(env: gym.Env, state: dict[str, Any] | None) -> None:
    """Restore ``env.np_random`` from :func:`env_rng_state`'s output."""
    if state is None:
        return
    bitgen = getattr(np.random, state["bit_generator"])()
    bitgen.state = state
    env.unwrapped.np_random = np.random.Generator(bitgen)


def seed_int(seed: np.random.SeedSequence) -> int:
    """A 32-bit integer seed drawn from a seed sequence (what ``env.reset(seed=...)`` takes)."""
    return int(seed.generate_state(1, np.uint32)[0])


def child_seed(seed: np.random.SeedSequence, *path: int) -> np.random.SeedSequence:
    """The ``path``-th descendant of ``seed``, the same as ``seed.spawn(...)[i]...`` but stateless."""
    return np.random.SeedSequence(
        entropy=seed.entropy, spawn_key=tuple(seed.spawn_key) + tuple(int(p) for p in path), pool_size=seed.pool_size
    )


def as_seed_sequence(seed: int | np.random.SeedSequence | None) -> np.random.SeedSequence:
    """Accept an int, a SeedSequence or None (fresh entropy)."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    return np.random.SeedSequence(seed)


# ---------------------------------------------------------------------- tasks (meta-RL)
@runtime_checkable
class TaskEnv(Protocol):
    """The task protocol of meta-RL environments (checked on ``env.unwrapped``).

    - ``sample_tasks(n, rng=None) -> list``: ``n`` task descriptions (small picklable values, e.g.
      ``{"goal": array}``) drawn with ``rng`` (a ``numpy.random.Generator``; None: the env's own).
    - ``set_task(task)``: later episodes run on ``task``.
    - optional, ``get_task()``: the current task (None before one is set). A worker's snapshot
      holds it, so that a worker restored from it runs on the same task even when no task
      schedule sets one (an environment that draws its task at its first reset, for example).
    """

    def sample_tasks(self, n: int, rng: np.random.Generator | None = None) -> list[Any]:
        """``n`` tasks drawn from the environment's task distribution."""

    def set_task(self, task: Any) -> None:
        """Run later episodes on ``task``."""


def task_env(env: gym.Env) -> TaskEnv:
    """The object under ``env``'s wrappers that implements the task protocol (a ConfigError if none)."""
    base = env.unwrapped
    if not isinstance(base, TaskEnv):
        raise ConfigError(
            f"environment {type(base).__name__} has no tasks (it lacks sample_tasks(n) / set_task(task)); "
            "meta-RL needs a task environment such as env=bandits, env=point_nav or env=half_cheetah_vel"
        )
    return base


def supports_tasks(env: gym.Env) -> bool:
    """True when ``env`` (under its wrappers) implements the task protocol."""
    return isinstance(env.unwrapped, TaskEnv)


def set_env_task(env: gym.Env, task: Any, task_id: int = -1) -> None:
    """``set_task(task)`` on the task environment under ``env``'s wrappers, remembering ``task_id``
    (read back with :func:`current_task_id`; -1: unknown)."""
    base = task_env(env)
    base.set_task(task)
    base.__dict__["_corral_task_id"] = int(task_id)


def current_task_id(env: gym.Env) -> int:
    """The id given with the last :func:`set_env_task` on ``env`` (-1 when none was given)."""
    return int(env.unwrapped.__dict__.get("_corral_task_id", -1))


def env_task_state(env: gym.Env) -> tuple[Any, int] | None:
    """``(task, task id)`` of a task environment that has ``get_task()`` and a current task; None
    otherwise (no task protocol, no ``get_task``, or no task yet)."""
    base = env.unwrapped
    get_task = getattr(base, "get_task", None)
    if not isinstance(base, TaskEnv) or get_task is None:
        return None
    task = get_task()
    return None if task is None else (task, current_task_id(env))


def restore_env_task(env: gym.Env, state: tuple[Any, int] | None) -> None:
    """Set the task :func:`env_task_state` returned back on ``env`` (nothing for None)."""
    if state is not None:
        task, task_id = state
        set_env_task(env, task, task_id)


__all__ = [
    "EnvSpec",
    "EnvFactory",
    "before_making",
    "cannot_make_message",
    "check_env_id",
    "gym_spec",
    "import_entry_point",
    "make_env",
    "limit_above_time_limit",
    "silence_gymnasium_deprecations",
    "is_new_env",
    "env_rng_state",
    "set_env_rng_state",
    "seed_int",
    "child_seed",
    "as_seed_sequence",
    "TaskEnv",
    "task_env",
    "supports_tasks",
    "set_env_task",
    "current_task_id",
    "env_task_state",
    "restore_env_task",
]
