"""Meta-evaluation of trial-running agents (RL2, PEARL): adaptation curves on held-out tasks.

An adaptation curve is the mean return of each episode index within a trial: on a held-out task,
a meta-learned agent should do better in its second episode than in its first. RL2's worker
returns a trial as one concatenated episode (``env_infos["rl2_episode"]`` numbers its episodes);
PEARL's returns each episode of a trial on its own (``episode_infos["pearl_episode"]``), the
second and later ones acting on the posterior over the trial's earlier episodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from corral.framework.batch import EpisodeBatch
from corral.framework.env import child_seed, make_env
from corral.framework.evaluation import EVAL_BRANCH, evaluation_episodes, evaluation_factory
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


def run_meta_test(
    policy: Policy,
    env: Any,
    *,
    split: TaskSplit,
    worker_class: type[Worker],
    worker_args: Mapping[str, Any],
    max_episode_length: int | None,
    seed: int,
    trials_per_task: int = 1,
    deterministic: bool = False,
    which: str = "test",
    episodes_per_trial: int = 1,
) -> EpisodeBatch:
    """``trials_per_task`` trials on each task of ``split``'s ``which`` set, with a copy of
    ``policy``, on seeds of their own (the same every call), in task order. ``episodes_per_trial``:
    batch episodes a trial makes (1 for RL2's concatenated trials)."""
    probe = make_env(env)
    try:
        n_tasks = len(split.tasks(probe, which))
    finally:
        probe.close()
    # Evaluation's path (corral.framework.evaluation): the run's workers on an evaluation seed branch.
    eval_seed = int(child_seed(np.random.SeedSequence(seed), EVAL_BRANCH, 1).generate_state(1, np.uint32)[0])
    run_factory = WorkerFactory(seed=seed, max_episode_length=max_episode_length, n_workers=1,
                                worker_class=worker_class, worker_args=dict(worker_args))
    factory = evaluation_factory(run_factory, seed=eval_seed, branch=())
    indices = tuple(i for i in range(n_tasks) for _ in range(trials_per_task))
    return evaluation_episodes(policy, env, factory, len(indices) * episodes_per_trial,
                               deterministic=deterministic, env_update=TaskSchedule(split, indices, which))


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
    "EVALUATING", "adaptation_stats", "curve_stats", "pearl_episode_returns", "run_meta_test", "trial_episode_returns",
]
