"""``worker=pearl``: trials of episodes on one task with PEARL's posterior sampling (Rakelly et al. 2019).

A trial is ``n_episodes_per_trial`` episodes on one task. The agent (``policy=pearl``) forgets its
context when a trial starts; the first ``n_prior_episodes`` episodes act with ``z`` drawn from the
prior ``N(0, I)``, every later one with ``z`` drawn from the posterior over the context of the
trial's earlier episodes (posterior sampling: the agent explores by acting out a hypothesis about
the task, then sharpens it). In deterministic mode (``policy.deterministic``) ``z`` is the prior
or posterior *mean* and actions are the mean action, so a trial is a pure function of the
parameters, the environment seed and the task.

Unlike RL2, each episode is its own episode in the batch, with

- ``episode_infos["task_id"]``: the task of the trial (-1 when unknown),
- ``episode_infos["pearl_episode"]``: the episode's index within its trial,
- ``episode_infos["pearl_posterior"]``: 1 when ``z`` came from the posterior, 0 from the prior,
- ``env_infos["context_reward"]``: the reward the encoder sees: the environment's reward, or
  ``info[context_reward]`` when set (PEARL's sparse point robot infers the goal from the sparse
  reward while the actor and critics learn from the dense one).

Tasks come as in ``worker=rl2`` (:mod:`corral.meta.trial_tasks`): a
:class:`~corral.meta.tasks.TaskSchedule` env update gives trial ``k`` the schedule's ``k``-th task;
without one (the trainer's evaluation, ``corral eval``) every trial runs on a new task drawn from
the environment's task distribution. When the schedule also carries that task's known context
(``algo.collect_context_size``), the trial's context starts with it: its posterior episodes then
act on the posterior over that context plus the trial's own earlier episodes, as PEARL's reference
code collects data (its prior episodes still act on the prior).

``n_envs`` slots run their trials side by side, an episode index at a time; ``rollout()`` returns
one trial per slot, ``rollout(n_episodes=n)`` exactly ``n`` episodes (whole trials, the last one
cut short if ``n`` asks for it) and ``rollout(min_steps=m)`` whole trials totalling at least ``m``
steps, trial by trial in slot order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.checks import check
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry
from corral.framework.worker import Worker
from corral.meta.trial_tasks import TrialTasksMixin
from corral.plugins.validation import component_class
from corral.rl.episode_buffer import EpisodeBuffers, action_clipper, batch_from_episodes


@dataclass
class PEARLWorkerConfig:
    """Settings of the PEARL worker."""

    n_episodes_per_trial: int = field(default=3, metadata=check(ge=1, help="episodes per task (context kept across them)"))
    n_prior_episodes: int = field(default=1, metadata=check(ge=0, le_field="n_episodes_per_trial", help="first episodes of a trial, acting with z from the prior"))
    n_envs: int = field(default=1, metadata=check(ge=1, help="environments stepped together by one worker"))
    context_reward: Optional[str] = field(
        default=None, metadata={"help": "info key whose value the encoder sees as the reward (null: the reward)"}
    )


class PEARLWorker(TrialTasksMixin, Worker):
    """Runs PEARL trials (see the module docstring)."""

    #: Read by composition checks: this worker drives a PEARL agent's context and z.
    samples_latent_tasks = True
    #: What the agent must offer; an action-server proxy does not, so those samplers refuse this worker.
    agent_methods = ("get_actions", "reset", "seed", "clear_context", "sample_z", "add_context")

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0,
                 n_episodes_per_trial: int = 3, n_prior_episodes: int = 1, n_envs: int = 1,
                 context_reward: str | None = None, **kwargs: Any) -> None:
        if n_episodes_per_trial < 1:
            raise ConfigError(f"worker.n_episodes_per_trial must be >= 1, got {n_episodes_per_trial}")
        if not 0 <= n_prior_episodes <= n_episodes_per_trial:
            raise ConfigError(
                f"worker.n_prior_episodes must be between 0 and n_episodes_per_trial ({n_episodes_per_trial}), "
                f"got {n_prior_episodes}"
            )
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number,
                         n_envs=n_envs, **kwargs)
        self.n_episodes_per_trial = int(n_episodes_per_trial)
        self.n_prior_episodes = int(n_prior_episodes)
        self.context_reward = context_reward or None
        self._buf: EpisodeBuffers | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None

    # ------------------------------------------------------------------ updates
    def update_agent(self, agent_update: Any) -> None:
        """As :meth:`Worker.update_agent`; the agent must be a PEARL agent."""
        super().update_agent(agent_update)
        if self.agent is not None and not all(hasattr(self.agent, m) for m in self.agent_methods):
            raise ConfigError(
                f"worker=pearl drives a PEARL agent (context and latent z), got {type(self.agent).__name__}; "
                "choose policy=pearl"
            )

    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        assert self.episode_limit is not None
        self._buf = EpisodeBuffers(self.n_envs, self.episode_limit, env.observation_space, env.action_space)
        self._clip = action_clipper(env.action_space)

    # ------------------------------------------------------------------ trials
    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Whole trials, each episode its own episode of the batch; see the module docstring."""
        per_trial = self.n_episodes_per_trial
        if min_steps is None and n_episodes is None:
            n_episodes = self.n_envs * per_trial
        episodes: list[dict[str, Any]] = []
        steps = 0
        while (n_episodes is not None and len(episodes) < n_episodes) or (
            n_episodes is None and steps < (min_steps or 0)
        ):
            n_trials = self.n_envs if n_episodes is None else min(
                self.n_envs, math.ceil((n_episodes - len(episodes)) / per_trial))
            for episode in self._run_trials(n_trials):
                episodes.append(episode)
                steps += len(episode["rewards"])
        if n_episodes is not None:
            episodes = episodes[:n_episodes]
        batch = batch_from_episodes(episodes)
        return dataclasses.replace(
            batch, env_infos={"context_reward": np.concatenate([e["context_reward"] for e in episodes])})

    def _run_trials(self, n_trials: int) -> list[dict[str, Any]]:
        """One trial in each of the first ``n_trials`` slots; their episodes, trial by trial."""
        buf, agent, clip = self._buf, self.agent, self._clip
        assert buf is not None, "the worker has no environment; call update_env first"
        assert agent is not None, "the worker has no agent; call update_agent(policy) first"
        limit = self.episode_limit
        assert limit is not None
        slots = range(n_trials)
        mask = np.zeros(self.n_envs, dtype=bool)
        mask[:n_trials] = True
        tasks, known = [], []
        for j in slots:
            tasks.append(self.next_trial_task(self.envs[j], j))
            known.append(self.last_trial_context())
        agent.clear_context(mask)  # type: ignore[attr-defined]
        for j, context in zip(slots, known):
            if context is not None:  # what is already known about the task (algo.collect_context_size)
                agent.add_context(j, context["observations"], context["actions"],  # type: ignore[attr-defined]
                                  context["rewards"])
        trials: list[list[dict[str, Any]]] = [[] for _ in slots]
        obs_all = np.zeros_like(buf.observations[:, 0])
        for e in range(self.n_episodes_per_trial):
            for j in slots:
                obs_all[j] = self.reset_env(j)[0]
            agent.reset(mask)
            agent.sample_z(mask, posterior=e >= self.n_prior_episodes)  # type: ignore[attr-defined]
            t = [0] * n_trials
            context_rewards = np.zeros((n_trials, limit), dtype=np.float32)
            active = list(slots)
            while active:
                actions, infos = agent.get_actions(obs_all)
                ended = []
                for j in active:
                    tj = t[j]
                    buf.observations[j, tj] = obs_all[j]
                    buf.actions[j, tj] = actions[j]
                    buf.write_agent_infos(j, tj, infos, j)
                    obs, reward, terminated, truncated, info = self.envs[j].step(
                        clip(actions[j]) if clip is not None else actions[j])
                    buf.rewards[j, tj] = reward
                    context_rewards[j, tj] = reward if self.context_reward is None else self._info_reward(info)
                    t[j] = tj = tj + 1
                    if getattr(obs, "shape", ()) != self.obs_shape:  # one tuple comparison per step
                        self.check_observation(obs, tj, j)
                    try:
                        obs_all[j] = obs
                    except (ValueError, TypeError):  # not numbers (a try costs nothing until it raises)
                        self.check_observation(obs, tj, j)
                        raise
                    if terminated or truncated or tj >= limit:
                        buf.step_types[j, tj - 1] = StepType.TERMINAL if terminated else StepType.TIMEOUT
                        ended.append(j)
                    else:
                        buf.step_types[j, tj - 1] = StepType.FIRST if tj == 1 else StepType.MID
                if ended:
                    active = [j for j in active if j not in ended]
            for j in slots:
                episode = buf.take(j, 0, t[j], obs_all[j])
                episode["context_reward"] = context_rewards[j, : t[j]].copy()
                episode["episode_infos"] = {"task_id": tasks[j], "pearl_episode": e,
                                            "pearl_posterior": int(e >= self.n_prior_episodes)}
                agent.add_context(j, episode["observations"], episode["actions"],  # type: ignore[attr-defined]
                                  episode["context_reward"])
                trials[j].append(episode)
        return [episode for trial in trials for episode in trial]

    def _info_reward(self, info: Mapping[str, Any]) -> float:
        try:
            return float(info[self.context_reward])  # type: ignore[index]  # only called when it is set
        except KeyError:
            raise ConfigError(
                f"worker.context_reward={self.context_reward!r}, but the environment's step info has no such key "
                f"(it has {sorted(info)}); set worker.context_reward=null to give the encoder the reward"
            ) from None



@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject PEARL compositions that cannot work, saying which option to choose instead."""
    registry = get_registry()
    worker_cls = registry.get("worker", cfg.worker.name).factory
    algo = component_class(registry.get("algo", cfg.algo.name).factory)
    policy = component_class(registry.get("policy", cfg.policy.name).factory)
    latent_worker = bool(getattr(worker_cls, "samples_latent_tasks", False))
    if getattr(algo, "needs_latent_worker", False) and not latent_worker:
        raise ConfigError(
            f"algo={cfg.algo.name} learns from PEARL trials, but worker={cfg.worker.name} does not sample z from a "
            "posterior; choose worker=pearl (or a preset: experiment=pearl_pointnav)"
        )
    if latent_worker and not hasattr(policy, "sample_z"):
        raise ConfigError(
            f"worker={cfg.worker.name} drives a PEARL agent (context and latent z), but policy={cfg.policy.name} is "
            "not one; choose policy=pearl"
        )
    if latent_worker and "rl2_inputs" not in cfg.env:
        raise ConfigError(
            f"worker={cfg.worker.name} needs a meta-RL environment with tasks, but env={cfg.env.name} has none; "
            "choose env=point_nav, env=half_cheetah_vel or env=half_cheetah_dir"
        )
    if latent_worker and cfg.env.rl2_inputs:
        raise ConfigError(
            f"worker={cfg.worker.name} infers the task from its context, not from RL2 inputs; set env.rl2_inputs=false"
        )
    if latent_worker and cfg.algo.get("context_from") == "prior" and cfg.worker.get("n_prior_episodes") == 0:
        raise ConfigError(  # what the algorithm would find in its first epoch, said before anything starts
            "algo.context_from=prior fills the context buffers with the episodes that act on the prior, and "
            "worker.n_prior_episodes=0 runs none; set worker.n_prior_episodes >= 1 or algo.context_from=all"
        )


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=pearl``."""
    register("worker", "pearl", PEARLWorker, config=PEARLWorkerConfig,
             help="PEARL trials: z from the prior, then from the posterior over the trial's context")


__all__ = ["PEARLWorker", "PEARLWorkerConfig"]
