"""Evaluation is sampling with deterministic actions, through the run's own workers.

There is no second environment-stepping loop: evaluation builds workers from the run's
:class:`~corral.framework.worker.WorkerFactory` (same worker class, worker settings and episode
limit, so the same environment construction, wrappers and action clipping as training), gives them
a deterministic copy of the policy (``policy.deterministic = True``, the :class:`Policy` contract)
and collects whole episodes with a sampler (``local`` by default).

Seeds: an evaluation worker's stream is a branch of the run's ``SeedSequence`` of its own,
``SeedSequence(seed).spawn_key + (EVAL_BRANCH, worker)``; training workers use ``(worker,)`` and
``(worker, restart)``. Evaluation therefore never draws from a training stream, never changes a
training episode, and gives the same episodes every time it is called with the same parameters.

Workers that return fragments (``worker=fragment``) are stitched back into whole episodes: the
evaluation takes each slot's first, second, ... episode, slot by slot, so which episodes count does
not depend on their lengths.

Videos: :func:`record_video` records the first evaluation episode through the recording
environments of :mod:`corral.framework.video` (whose names are importable from here too).
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import child_seed
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.video import (
    VIDEO_EXTRA,
    VIDEO_SLOT_INFO,
    RecordedEnvFactory,
    check_recordable,
    check_video_complete,
    encode_gif,
    read_video_frames,
    recorded_videos,
    recording_envs,
    require_video,
)
from corral.framework.worker import WorkerFactory

#: Spawn-key branch reserved for evaluation seeds (training workers use 0, 1, ...).
EVAL_BRANCH = 2**31 - 1


@dataclass
class EvalWorkerFactory(WorkerFactory):
    """A run's :class:`WorkerFactory` moved onto a seed branch of its own.

    Worker ``i`` is seeded with ``child_seed(SeedSequence(seed), *branch, i)``; everything else
    (worker class, worker settings, episode limit) is the run's.
    """

    branch: tuple[int, ...] = (EVAL_BRANCH,)

    @property
    def root_seed(self) -> np.random.SeedSequence:
        """The evaluation branch of the run's seed sequence."""
        return child_seed(np.random.SeedSequence(self.seed), *self.branch)


def evaluation_factory(
    factory: WorkerFactory,
    *,
    seed: int | None = None,
    n_workers: int = 1,
    max_episode_length: int | None = None,
    branch: Sequence[int] = (EVAL_BRANCH,),
) -> EvalWorkerFactory:
    """The evaluation twin of a run's ``factory``: same workers, ``n_workers`` of them, seeded from
    ``branch`` of ``seed`` (default: the run's seed). ``max_episode_length`` replaces the run's limit
    (e.g. for another environment id); None keeps it."""
    return EvalWorkerFactory(
        seed=factory.seed if seed is None else int(seed),
        max_episode_length=factory.max_episode_length if max_episode_length is None else max_episode_length,
        n_workers=int(n_workers),
        worker_class=factory.worker_class,
        worker_args=dict(factory.worker_args),
        branch=tuple(int(b) for b in branch),
    )


def run_worker_factory(algo: Any, *, seed: int, max_episode_length: int | None) -> WorkerFactory:
    """The WorkerFactory a run samples with: its sampler's, or (an algorithm without a sampler, in
    library use) the default worker with ``max_episode_length``."""
    factory = getattr(getattr(algo, "sampler", None), "worker_factory", None)
    if isinstance(factory, WorkerFactory):
        return factory
    return WorkerFactory(seed=seed, max_episode_length=max_episode_length)


def deterministic_copy(policy: Policy, deterministic: bool = True) -> Policy:
    """A copy of ``policy`` acting in deterministic (mode) or sampling mode; ``policy`` is untouched."""
    agent = copy.deepcopy(policy)
    agent.deterministic = bool(deterministic)
    return agent


def evaluation_episodes(
    policy: Policy,
    env: Any,
    worker_factory: WorkerFactory,
    n_episodes: int,
    *,
    deterministic: bool = True,
    sampler: str | type = "local",
    sampler_options: Mapping[str, Any] | None = None,
    env_update: Any = None,
) -> EpisodeBatch:
    """``n_episodes`` whole episodes of ``policy`` on ``env`` (an Env, an EnvFactory or a list of one
    per worker), collected by ``sampler`` with workers from ``worker_factory`` (pass an
    :func:`evaluation_factory` to stay off the training seeds). Episodes are in worker order;
    ``n_episodes`` is spread evenly over the workers. ``env_update`` (e.g. a task schedule) is sent
    with the first request, after ``env``."""
    if n_episodes < 1:
        raise ConfigError(f"evaluation needs at least one episode, got {n_episodes}")
    sampler_cls = _sampler_class(sampler)
    agent = deterministic_copy(policy, deterministic)
    n_workers = worker_factory.n_workers
    per_worker = math.ceil(n_episodes / n_workers)
    fragments = bool(getattr(worker_factory.worker_class, "returns_fragments", False))
    with sampler_cls.from_worker_factory(worker_factory, agents=agent, envs=env, **dict(sampler_options or {})) as s:
        if fragments:
            episodes = _whole_episodes_from_fragments(s, worker_factory, per_worker, env_update)
        else:
            episodes = s.obtain_exact_episodes(per_worker, None, env_update).split()
    if fragments:  # the slots ran on past the episodes taken: drop the videos of the others
        _prune_fragment_videos(env, worker_factory, per_worker)
    if len(episodes) < n_episodes:  # pragma: no cover - a sampler that broke its contract
        raise RuntimeError(f"evaluation asked for {n_episodes} episodes and got {len(episodes)}")
    _prune_untaken_slot_videos(env, episodes[:n_episodes], per_worker)
    # Worker by worker, so that the first n_episodes take ceil(n/W) from the first workers.
    return EpisodeBatch.concatenate(*episodes[: n_episodes])


@dataclass(frozen=True)
class TrialEvaluation:
    """An evaluation of an agent that runs trials on given tasks (meta-RL), as its algorithm plans it.

    An algorithm whose agent runs trials offers ``held_out_evaluation(env, *, seed, n_trials=None,
    deterministic=None, n_workers=1) -> TrialEvaluation``: its own meta-evaluation's tasks, seeds,
    agent and worker settings (``n_trials`` None: the meta-evaluation's own number of trials). The
    trainer's meta-evaluation and ``corral eval`` both run it, so the two cannot drift apart.
    """

    #: The agent that acts (a copy of the algorithm's policy, in its evaluation settings).
    policy: Policy
    #: The workers, on the meta-evaluation's seed branch.
    worker_factory: WorkerFactory
    #: The task schedule(s), sent with the first request (a list: one per worker).
    env_update: Any
    #: Trials to run, spread evenly over the workers.
    n_trials: int
    #: Rows of the episode batch that make one trial (1: a trial is one concatenated episode).
    rows_per_trial: int
    #: Environment episodes in one trial.
    episodes_per_trial: int
    #: Actions: the policy's mode (True) or sampled.
    deterministic: bool
    #: Which tasks the trials run on, in words (``corral eval`` prints it).
    tasks: str
    #: The algorithm's meta-evaluation statistics of the batch (``meta_eval/...``).
    statistics: Callable[[EpisodeBatch], dict[str, float]]

    def run(self, env: Any, *, sampler: str | type = "local") -> EpisodeBatch:
        """The trials on ``env`` (an Env, an EnvFactory or one per worker), in worker order."""
        return evaluation_episodes(self.policy, env, self.worker_factory, self.n_trials * self.rows_per_trial,
                                   deterministic=self.deterministic, sampler=sampler, env_update=self.env_update)

    def trial_returns(self, batch: EpisodeBatch) -> tuple[np.ndarray, np.ndarray]:
        """The return and the length (steps) of each trial of ``batch`` (one of :meth:`run`'s)."""
        returns = batch.episode_returns.astype(np.float64).reshape(self.n_trials, self.rows_per_trial).sum(axis=1)
        lengths = batch.lengths.reshape(self.n_trials, self.rows_per_trial).sum(axis=1)
        return returns, lengths


def episode_statistics(episodes: EpisodeBatch, prefix: str = "eval") -> dict[str, float]:
    """``{prefix}/return_mean``, ``return_std``, ``return_min``, ``return_max`` and ``episode_length``
    (the mean length) of whole episodes."""
    r = episodes.episode_returns.astype(np.float64)
    return {
        f"{prefix}/return_mean": float(r.mean()),
        f"{prefix}/return_std": float(r.std()),
        f"{prefix}/return_min": float(r.min()),
        f"{prefix}/return_max": float(r.max()),
        f"{prefix}/episode_length": float(episodes.lengths.mean()),
    }


def evaluate(
    policy: Policy,
    envs: Any,
    *,
    n_episodes: int,
    seed: int | None = None,
    worker_factory: WorkerFactory | None = None,
    max_episode_length: int | None = None,
    deterministic: bool = True,
    n_workers: int = 1,
    sampler: str | type = "local",
    sampler_options: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Run ``n_episodes`` with a deterministic copy of ``policy`` through the run's workers; the same
    episodes every call. ``worker_factory`` is the run's (None: the default worker with
    ``max_episode_length``); ``seed`` defaults to its seed.

    Returns ``eval/return_mean``, ``eval/return_std``, ``eval/return_min``, ``eval/return_max``
    and ``eval/episode_length``.
    """
    if worker_factory is None:
        if seed is None:
            raise ConfigError("evaluate() needs a seed or the run's worker_factory")
        worker_factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length)
    factory = evaluation_factory(worker_factory, seed=seed, n_workers=n_workers, max_episode_length=max_episode_length)
    episodes = evaluation_episodes(policy, envs, factory, n_episodes, deterministic=deterministic,
                                   sampler=sampler, sampler_options=sampler_options)
    return episode_statistics(episodes)


# ---------------------------------------------------------------------- video
# Recording environments, reading videos back: corral.framework.video (its names are importable from here too).
def record_video(
    policy: Policy,
    env: Any,
    worker_factory: WorkerFactory,
    video_folder: str | Path,
    *,
    name_prefix: str = "eval",
    seed: int | None = None,
    deterministic: bool = True,
) -> tuple[Path, EpisodeBatch]:
    """Record the first evaluation episode (the same one :func:`evaluate` runs first) to
    ``{video_folder}/{name_prefix}.mp4``; return its path and the episode."""
    require_video()
    folder = Path(video_folder)
    factory = evaluation_factory(worker_factory, seed=seed)
    episode = evaluation_episodes(policy, recording_envs(env, folder, 1, name_prefix), factory, 1,
                                  deterministic=deterministic)
    new = recorded_videos(folder, name_prefix)
    if not new:  # pragma: no cover - RecordVideo writes on reset/close
        raise RuntimeError(f"no video was written to {folder}")
    for extra in new[1:]:  # a fragment worker's slots run on past the episode
        extra.unlink(missing_ok=True)
    path = folder / f"{name_prefix}.mp4"
    new[0].replace(path)
    check_video_complete(path)  # an OSError naming it: what a full disk leaves, unnoticed by the writer
    return path, episode


# ---------------------------------------------------------------------- internals
def _sampler_class(sampler: str | type) -> Any:
    if isinstance(sampler, str):
        from corral.framework.plugins import get_registry

        return get_registry().get("sampler", sampler).factory
    return sampler


def _worker_arg(factory: WorkerFactory, name: str) -> int:
    """A worker setting: from ``worker_args``, else the worker class's default."""
    if name in factory.worker_args:
        return int(factory.worker_args[name])
    param = inspect.signature(factory.worker_class).parameters.get(name)  # type: ignore[arg-type]
    if param is None or param.default is inspect.Parameter.empty:
        raise ConfigError(
            f"evaluation needs whole episodes, but worker {getattr(factory.worker_class, '__name__', '?')} returns "
            f"fragments and has no '{name}' setting to stitch them by; evaluate with worker=vec"
        )
    return int(param.default)


def _whole_episodes_from_fragments(sampler: Any, factory: WorkerFactory, per_worker: int,
                                   env_update: Any = None) -> list[EpisodeBatch]:
    """Whole episodes from a worker that returns ``n_envs * timesteps_per_call`` steps per rollout as
    fragments, slot by slot: per worker, episode ``e`` of slot ``j`` is its ``e * n_envs + j``-th."""
    k = _worker_arg(factory, "n_envs")
    steps = _worker_arg(factory, "timesteps_per_call")
    n_workers = factory.n_workers
    need = [math.ceil((per_worker - j) / k) for j in range(k)]
    done: list[list[list[EpisodeBatch]]] = [[[] for _ in range(k)] for _ in range(n_workers)]
    open_: list[list[list[EpisodeBatch]]] = [[[] for _ in range(k)] for _ in range(n_workers)]
    limit = factory.max_episode_length or 10**6
    max_calls = (max(need) + 1) * math.ceil(limit / steps) + 2
    for _ in range(max_calls):
        if all(len(done[w][j]) >= need[j] for w in range(n_workers) for j in range(k)):
            break
        pieces = iter(sampler.obtain_exact_episodes(1, None, env_update).split())
        env_update = None
        for w in range(n_workers):
            for j in range(k):
                got = 0
                while got < steps:
                    piece = next(pieces)
                    got += len(piece)
                    open_[w][j].append(piece)
                    if piece.step_types[-1] in (StepType.TERMINAL, StepType.TIMEOUT):
                        done[w][j].append(_join(open_[w][j]))
                        open_[w][j] = []
                if got != steps:
                    raise RuntimeError(f"fragment worker slot {j} returned {got} steps, expected {steps}")
    else:  # pragma: no cover - every episode ends at the episode limit
        raise RuntimeError("evaluation could not collect whole episodes from the fragment worker")
    out = []
    for w in range(n_workers):
        ordered = [done[w][j][e] for e in range(max(need)) for j in range(k) if e < need[j]]
        out.extend(ordered[:per_worker])
    return out


def _prune_fragment_videos(env: Any, factory: WorkerFactory, per_worker: int) -> None:
    """Delete the videos a fragment worker's slots recorded of episodes the evaluation did not take
    (slot ``j`` keeps its first ``ceil((per_worker - j) / n_envs)``)."""
    recipes = [r for r in (env if isinstance(env, list) else [env]) if isinstance(r, RecordedEnvFactory)]
    if not recipes:
        return
    k = _worker_arg(factory, "n_envs")
    need = [math.ceil((per_worker - j) / k) for j in range(k)]
    for recipe in recipes:
        prefix = f"{recipe.name_prefix}-w{recipe.worker}-s"
        for path in Path(recipe.video_folder).glob(f"{prefix}*-episode-*.mp4"):
            slot, _, episode = path.stem[len(prefix):].partition("-episode-")
            if slot.isdigit() and episode.isdigit() and int(episode) >= need[int(slot)]:
                path.unlink(missing_ok=True)


def _prune_untaken_slot_videos(env: Any, taken: list[EpisodeBatch], per_worker: int) -> None:
    """Delete the videos of episodes the evaluation did not take, for workers whose slots all record
    (their episodes carry :data:`VIDEO_SLOT_INFO`): worker ``w`` keeps slot ``s``'s first ``n`` videos,
    ``n`` the taken episodes of ``w`` from ``s`` (episodes come in worker order, ``per_worker`` each)."""
    recipes = {r.worker: r for r in (env if isinstance(env, list) else [env]) if isinstance(r, RecordedEnvFactory)}
    if not recipes or not all(VIDEO_SLOT_INFO in e.episode_infos for e in taken):
        return
    kept: dict[tuple[int, int], int] = {}
    for i, batch in enumerate(taken):
        key = (i // per_worker, int(batch.episode_infos[VIDEO_SLOT_INFO][0]))
        kept[key] = kept.get(key, 0) + 1
    for w, recipe in recipes.items():
        prefix = f"{recipe.name_prefix}-w{w}-s"
        for path in Path(recipe.video_folder).glob(f"{prefix}*-episode-*.mp4"):
            slot, _, number = path.stem[len(prefix):].partition("-episode-")
            if slot.isdigit() and number.isdigit() and int(number) >= kept.get((w, int(slot)), 0):
                path.unlink(missing_ok=True)


def _join(pieces: list[EpisodeBatch]) -> EpisodeBatch:
    """One whole episode from its fragments, in order."""
    infos = {k: v for k, v in pieces[0].episode_infos.items() if k not in ("prior_length", "prior_return")}
    if len(pieces) == 1:
        return EpisodeBatch(pieces[0].observations, pieces[0].actions, pieces[0].rewards, pieces[0].step_types,
                            pieces[0].lengths, pieces[0].last_observations, pieces[0].env_infos,
                            pieces[0].agent_infos, infos)
    cat = EpisodeBatch.concatenate(*pieces)
    return EpisodeBatch(cat.observations, cat.actions, cat.rewards, cat.step_types, np.array([len(cat)]),
                        pieces[-1].last_observations, cat.env_infos, cat.agent_infos, infos)


__all__ = [
    "EVAL_BRANCH", "EvalWorkerFactory", "RecordedEnvFactory", "TrialEvaluation", "VIDEO_EXTRA", "check_recordable", "check_video_complete",
    "deterministic_copy",
    "encode_gif",
    "episode_statistics",
    "evaluate", "evaluation_episodes", "evaluation_factory", "read_video_frames", "record_video", "recorded_videos", "recording_envs",
    "require_video", "run_worker_factory",
]
