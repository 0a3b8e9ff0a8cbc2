"""Meta-evaluation of trial-running agents (RL2, PEARL): adaptation curves on held-out tasks.

An adaptation curve is the mean return of each episode index within a trial: on a held-out task,
a meta-learned agent should do better in its second episode than in its first. RL2's worker
returns a trial as one concatenated episode (``env_infos["rl2_episode"]`` numbers its episodes);
PEARL's returns each episode of a trial on its own (``episode_infos["pearl_episode"]``), the
second and later ones acting on the posterior over the trial's earlier episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from corral.framework.batch import EpisodeBatch
from corral.framework.env import child_seed, make_env
from corral.framework.errors import ConfigError
from corral.framework.evaluation import EVAL_BRANCH, TrialEvaluation, evaluation_factory
from corral.framework.policy import Policy
from corral.framework.worker import Worker, WorkerFactory
from corral.meta.tasks import TaskSchedule, TaskSplit

#: The ``applies_if`` of an algorithm setting that only its ``meta_evaluate`` reads: the trainer calls
#: ``meta_evaluate`` within its evaluation, so with ``trainer.eval_every=0`` such a setting changes nothing.
EVALUATING = ("trainer.eval_every", ">", 0)


def trial_episode_returns(trials: EpisodeBatch) -> np.ndarray:
    """``[n_trials, n_episodes_per_trial]`` returns of each episode of each trial (a batch from
    ``worker=rl2``, whose ``env_infos["rl2_episode"]`` numbers the episodes of a trial)."""
    index = trials.env_infos["rl2_episode"].astype(np.int64)
    trial = np.repeat(np.arange(trials.n_episodes), trials.lengths)
    out = np.zeros((trials.n_episodes, int(index.max()) + 1), dtype=np.float64)
    np.add.at(out, (trial, index), trials.rewards.astype(np.float64))
    return out


def pearl_episode_returns(episodes: EpisodeBatch, rewards: np.ndarray | None = None) -> np.ndarray:
    """``[n_trials, n_episodes_per_trial]`` returns of a batch from ``worker=pearl`` (trials in order,
    each episode its own row of the batch); ``rewards`` (one per step) replaces the batch's rewards,
    e.g. ``env_infos["context_reward"]`` for the sparse return."""
    index = episodes.episode_infos["pearl_episode"].astype(np.int64)
    per_trial = int(index.max()) + 1
    if len(index) % per_trial or (index.reshape(-1, per_trial) != np.arange(per_trial)).any():
        raise ValueError("the batch does not hold whole PEARL trials in order")
    r = episodes.rewards if rewards is None else np.asarray(rewards)
    returns = np.add.reduceat(r.astype(np.float64), episodes.starts) if len(r) else np.zeros(0)
    return returns.reshape(-1, per_trial)


def meta_test_plan(
    policy: Policy,
    env: Any,
    *,
    split: TaskSplit,
    worker_class: type[Worker],
    worker_args: Mapping[str, Any],
    max_episode_length: int | None,
    seed: int,
    statistics: Callable[[EpisodeBatch], dict[str, float]],
    trials_per_task: int = 1,
    deterministic: bool = False,
    which: str = "test",
    episodes_per_trial: int = 1,
    rows_per_trial: int = 1,
    n_trials: int | None = None,
    n_workers: int = 1,
) -> TrialEvaluation:
    """The meta-test of ``policy``: ``trials_per_task`` trials on each task of ``split``'s ``which``
    set, in task order, on seeds of their own (the same every call), as a
    :class:`~corral.framework.evaluation.TrialEvaluation`. ``n_trials`` (None: that many) cycles
    through that order; with ``n_workers`` workers, worker ``w`` runs the ``w``-th share of it.
    ``rows_per_trial``: batch episodes a trial makes (1 for RL2's concatenated trials);
    ``episodes_per_trial``: environment episodes in a trial."""
    probe = make_env(env)
    try:
        n_tasks = len(split.tasks(probe, which))
    finally:
        probe.close()
    order = tuple(i for i in range(n_tasks) for _ in range(trials_per_task))
    n = len(order) if n_trials is None else int(n_trials)
    if n < 1 or n % n_workers:
        raise ConfigError(f"{n} trials on {n_workers} workers: give a number of trials that is a positive multiple "
                          f"of the workers (each worker runs its share of the held-out tasks)")
    indices = tuple(order[k % len(order)] for k in range(n))
    share = n // n_workers
    schedules = [TaskSchedule(split, indices[w * share:(w + 1) * share], which) for w in range(n_workers)]
    # Evaluation's path (corral.framework.evaluation): the run's workers on an evaluation seed branch.
    eval_seed = int(child_seed(np.random.SeedSequence(seed), EVAL_BRANCH, 1).generate_state(1, np.uint32)[0])
    run_factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length, n_workers=1,
                                worker_class=worker_class, worker_args=dict(worker_args))
    factory = evaluation_factory(run_factory, seed=eval_seed, branch=(), n_workers=n_workers)
    return TrialEvaluation(
        policy=policy, worker_factory=factory, env_update=schedules[0] if n_workers == 1 else schedules,
        n_trials=n, rows_per_trial=rows_per_trial, episodes_per_trial=episodes_per_trial,
        deterministic=bool(deterministic), tasks=_tasks_in_words(split, which, n_tasks, trials_per_task, n),
        statistics=statistics,
    )


def _tasks_in_words(split: TaskSplit, which: str, n_tasks: int, trials_per_task: int, n_trials: int) -> str:
    """Which tasks a meta-test of ``n_trials`` trials runs, for ``corral eval``'s ``tasks:`` line."""
    first, last = split.task_id(which, 0), split.task_id(which, n_tasks - 1)
    ids = f"id {first}" if n_tasks == 1 else f"ids {first}-{last}"
    if which == "test" and split.n_test > 0:
        kind = f"the run's {n_tasks} held-out meta-test task{'s' if n_tasks != 1 else ''}"
    else:
        kind = f"the run's {n_tasks} meta-train task{'s' if n_tasks != 1 else ''} (algo.n_test_tasks=0: its meta-eval runs them)"
    own = n_tasks * trials_per_task
    per = f"each task {trials_per_task} trial{'s' if trials_per_task != 1 else ''} in a row, {own} in all"
    ran = "all of them" if n_trials == own else f"{n_trials} of them, cycling"
    return f"{kind} ({ids}, algo.task_seed={split.seed}), in the order of the run's meta-eval ({per}): {ran}"


def run_meta_test(policy: Policy, env: Any, **plan: Any) -> EpisodeBatch:
    """The trials of :func:`meta_test_plan` (its keywords; ``statistics`` not needed), run on ``env``."""
    plan.setdefault("statistics", adaptation_stats)
    return meta_test_plan(policy, env, **plan).run(env)


def curve_stats(returns: np.ndarray, prefix: str = "meta_eval", name: str = "return") -> dict[str, float]:
    """``{prefix}/{name}_ep{i}`` (mean over trials of episode i's return) for ``[n_trials, n_episodes]`` returns."""
    return {f"{prefix}/{name}_ep{i}": float(v) for i, v in enumerate(returns.mean(axis=0))}


def adaptation_stats(trials: EpisodeBatch, prefix: str = "meta_eval") -> dict[str, float]:
    """``{prefix}/return_ep{i}`` (mean return of episode i of a trial), ``{prefix}/trial_return``
    and ``{prefix}/n_trials``."""
    returns = trial_episode_returns(trials)
    stats = curve_stats(returns, prefix)
    stats[f"{prefix}/trial_return"] = float(returns.sum(axis=1).mean())
    stats[f"{prefix}/n_trials"] = float(len(returns))
    return stats


__all__ = [
    "EVALUATING", "adaptation_stats", "curve_stats", "meta_test_plan", "pearl_episode_returns", "run_meta_test", "trial_episode_returns",
]
