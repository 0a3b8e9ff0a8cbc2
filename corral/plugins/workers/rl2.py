"""``worker=rl2``: trials of ``n_episodes_per_trial`` episodes on one task (RL2; Duan et al. 2016).

A trial runs several episodes on one task with a recurrent agent whose hidden state is carried
across them: the agent is reset (``agent.reset(mask)``) only at a trial's start, and the RL2
wrapper (``env.rl2_inputs=true``) shows it the previous action, reward and done flag, also
across the episode boundary. The algorithm sees each trial as one episode: the episodes of a
trial are concatenated, the trial ends TERMINAL (the meta-episode is over), and

- ``env_infos["rl2_episode"]``: the episode index within the trial of every step,
- ``env_infos["rl2_step_type"]``: the step type the step had in its own episode,
- ``episode_infos["task_id"]``: the task of the trial (-1 when unknown).

Tasks (:mod:`corral.meta.trial_tasks`): an env update that is a :class:`~corral.meta.tasks.TaskSchedule`
gives trial ``k`` of the worker the schedule's ``k``-th task (``algo=rl2_ppo`` sends one schedule
per worker each epoch); without one (the trainer's evaluation, ``corral eval``) every trial runs on
a new task drawn from the environment's task distribution; after an env update that sets the task
itself (a :class:`~corral.meta.tasks.SetTask`) every trial runs on the environment's current task.

Like ``worker=vec``, ``n_envs`` slots step in lock-step with one batched ``get_actions`` call;
``rollout()`` returns one trial per slot, ``rollout(n_episodes=n)`` exactly ``n`` trials,
``rollout(min_steps=m)`` whole trials totalling at least ``m`` steps, in the order they started.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.checks import check
from corral.framework.env import current_task_id
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry
from corral.framework.worker import Worker
from corral.meta.rl2_env import CONTINUE_TRIAL, is_rl2_env
from corral.meta.trial_tasks import TrialTasksMixin
from corral.plugins.validation import component_class
from corral.rl.episode_buffer import StepLog, action_clipper


@dataclass
class RL2WorkerConfig:
    """Settings of the RL2 worker."""

    n_episodes_per_trial: int = field(default=2, metadata=check(ge=1, help="episodes per trial on one task (hidden state kept)"))
    n_envs: int = field(default=1, metadata=check(ge=1, help="environments stepped together by one worker"))


class RL2Worker(TrialTasksMixin, Worker):
    """Runs RL2 trials (see the module docstring)."""

    #: Read by composition checks: this worker runs trials for a recurrent agent.
    runs_trials = True

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0,
                 n_episodes_per_trial: int = 2, n_envs: int = 1, **kwargs: Any) -> None:
        if n_episodes_per_trial < 1:
            raise ConfigError(f"worker.n_episodes_per_trial must be >= 1, got {n_episodes_per_trial}")
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number,
                         n_envs=n_envs, **kwargs)
        self.n_episodes_per_trial = int(n_episodes_per_trial)
        self._log: StepLog | None = None
        self._obs: np.ndarray | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None

    # ------------------------------------------------------------------ updates
    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        if not is_rl2_env(env):
            raise ConfigError(
                "worker=rl2 needs the RL2 observation (previous action, reward and done): the environment is "
                "not wrapped in corral.meta.rl2_env.RL2Env; set env.rl2_inputs=true (the rl2_* presets do)"
            )
        assert self.episode_limit is not None
        trial = self.n_episodes_per_trial * self.episode_limit
        self._log = StepLog(self.n_envs, env.observation_space, env.action_space, capacity=trial + 1)
        self._obs = np.zeros_like(self._log.observations[0])
        self._clip = action_clipper(env.action_space)

    # ------------------------------------------------------------------ trials
    def _reset_slot(self, j: int, continue_trial: bool) -> Any:
        """Reset slot ``j`` (seeding it on its first reset): a new trial, or the trial's next episode."""
        return self.reset_env(j, options={CONTINUE_TRIAL: True} if continue_trial else None)[0]

    def _start_trial(self, j: int) -> int:
        """Set slot ``j``'s task for a new trial and reset it; return the task id."""
        self.next_trial_task(self.envs[j], j)
        assert self._obs is not None
        self._obs[j] = self._reset_slot(j, continue_trial=False)
        return current_task_id(self.envs[j])

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Whole trials (each one episode of the batch); see the module docstring."""
        if min_steps is None and n_episodes is None:
            n_episodes = self.n_envs
        log, obs_all, agent = self._log, self._obs, self.agent
        assert log is not None and obs_all is not None, "the worker has no environment; call update_env first"
        assert agent is not None, "the worker has no agent; call update_agent(policy) first"
        k, limit, per_trial, clip = self.n_envs, self.episode_limit, self.n_episodes_per_trial, self._clip
        shape = self.obs_shape
        assert limit is not None
        target = min_steps or 0
        steps = [env.step for env in self.envs]

        t = [0] * k  # steps in the slot's current episode
        trial_t = [0] * k  # steps in the slot's current trial
        episode = [0] * k  # episode index within the trial
        first_row = [0] * k
        task = [-1] * k
        inner_lengths: list[list[int]] = [[] for _ in range(k)]
        inner_types: list[list[int]] = [[] for _ in range(k)]
        rewards: list[Any] = [0.0] * k  # each env's reward as it returns it (SupportsFloat)
        n_first = k if n_episodes is None else min(k, n_episodes)
        active = list(range(n_first))
        for j in active:
            task[j] = self._start_trial(j)
        started = n_first
        mask = np.zeros(k, dtype=bool)
        mask[:n_first] = True
        agent.reset(mask)

        done_slots: list[int] = []
        done_rows: list[int] = []
        done_lengths: list[int] = []
        done_last: list[np.ndarray] = []
        done_tasks: list[int] = []
        done_inner: list[tuple[list[int], list[int]]] = []
        steps_taken = 0
        row = 0
        while active:
            if row >= log.capacity:
                log.reserve(row + 1, keep=row)
            actions, infos = agent.get_actions(obs_all)
            log.write(row, obs_all, actions, infos)
            env_actions = list(clip(actions) if clip is not None else actions)
            ends: list[tuple[int, bool]] = []
            for j in active:
                o, r, terminated, truncated, _ = steps[j](env_actions[j])
                t[j] += 1
                if getattr(o, "shape", ()) != shape:  # one tuple comparison per step
                    self.check_observation(o, t[j], j)
                try:
                    obs_all[j] = o
                except (ValueError, TypeError):  # not numbers (a try costs nothing until it raises)
                    self.check_observation(o, t[j], j)
                    raise
                rewards[j] = r
                trial_t[j] += 1
                if terminated or truncated or t[j] >= limit:
                    ends.append((j, bool(terminated)))
            log.rewards[row] = rewards
            steps_taken += len(active)
            if ends:
                restart = None
                stopped = False
                for j, terminated in ends:
                    inner_lengths[j].append(t[j])
                    inner_types[j].append(StepType.TERMINAL if terminated else StepType.TIMEOUT)
                    episode[j] += 1
                    t[j] = 0
                    if episode[j] < per_trial:  # the trial goes on: next episode, same task, same memory
                        obs_all[j] = self._reset_slot(j, continue_trial=True)
                        continue
                    done_slots.append(j)
                    done_rows.append(first_row[j])
                    done_lengths.append(trial_t[j])
                    done_last.append(obs_all[j].copy())
                    done_tasks.append(task[j])
                    done_inner.append((inner_lengths[j], inner_types[j]))
                    inner_lengths[j], inner_types[j] = [], []
                    more = started < n_episodes if n_episodes is not None else steps_taken < target
                    if more:
                        task[j] = self._start_trial(j)
                        episode[j] = 0
                        trial_t[j] = 0
                        first_row[j] = row + 1
                        started += 1
                        if restart is None:
                            restart = np.zeros(k, dtype=bool)
                        restart[j] = True
                    else:
                        trial_t[j] = -1
                        stopped = True
                if stopped:
                    active = [j for j in active if trial_t[j] >= 0]
                if restart is not None:
                    agent.reset(restart)
            row += 1
        order = np.lexsort((np.asarray(done_slots), np.asarray(done_rows))).tolist()
        batch = log.gather(
            np.asarray(done_slots)[order],
            np.asarray(done_rows)[order],
            np.asarray(done_lengths)[order],
            np.ones(len(order), dtype=bool),  # a trial's end is the end of the meta-episode
            [done_last[i] for i in order],
        )
        episode_index = np.concatenate([
            np.repeat(np.arange(len(done_inner[i][0]), dtype=np.int32), done_inner[i][0]) for i in order
        ])
        inner_step_types = np.concatenate([_inner_step_types(*done_inner[i]) for i in order])
        return dataclasses.replace(
            batch,
            env_infos={"rl2_episode": episode_index, "rl2_step_type": inner_step_types},
            episode_infos={"task_id": np.asarray([done_tasks[i] for i in order], dtype=np.int64)},
        )



def _inner_step_types(lengths: list[int], ends: list[int]) -> np.ndarray:
    """Per-step types of a trial's episodes in their own right (FIRST, MID..., TERMINAL/TIMEOUT)."""
    parts = []
    for n, end in zip(lengths, ends):
        types = np.full(n, StepType.MID, dtype=np.uint8)
        types[0] = StepType.FIRST
        types[-1] = end
        parts.append(types)
    return np.concatenate(parts)


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject RL2 compositions that cannot work, saying which option to choose instead."""
    registry = get_registry()
    worker_cls = registry.get("worker", cfg.worker.name).factory
    algo = component_class(registry.get("algo", cfg.algo.name).factory)
    policy = component_class(registry.get("policy", cfg.policy.name).factory)
    runs_trials = bool(getattr(worker_cls, "runs_trials", False))
    recurrent = bool(getattr(policy, "recurrent", False))
    if getattr(algo, "needs_trials", False) and not runs_trials:
        raise ConfigError(
            f"algo={cfg.algo.name} trains on whole RL2 trials, but worker={cfg.worker.name} does not run trials; "
            "choose worker=rl2 (or a preset: experiment=rl2_bandits)"
        )
    if runs_trials and not recurrent:
        raise ConfigError(
            f"worker={cfg.worker.name} carries the agent's memory across the episodes of a trial, but "
            f"policy={cfg.policy.name} is not recurrent; choose policy=gru"
        )
    if recurrent and not getattr(algo, "trains_recurrent", False):
        raise ConfigError(
            f"policy={cfg.policy.name} is recurrent, but algo={cfg.algo.name} trains on single steps; "
            "choose algo=rl2_ppo (or policy=mlp)"
        )
    if runs_trials and "rl2_inputs" not in cfg.env:
        raise ConfigError(
            f"worker={cfg.worker.name} needs a meta-RL environment with tasks, but env={cfg.env.name} has none; "
            "choose env=bandits, env=point_nav, env=half_cheetah_vel or env=half_cheetah_dir"
        )
    if runs_trials and not cfg.env.rl2_inputs:
        raise ConfigError(
            f"worker={cfg.worker.name} needs the RL2 observation (previous action, reward, done); "
            "set env.rl2_inputs=true (the rl2_* presets do)"
        )


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=rl2``."""
    register("worker", "rl2", RL2Worker, config=RL2WorkerConfig,
             help="RL2 trials: several episodes per task, agent reset only at a trial's start")
