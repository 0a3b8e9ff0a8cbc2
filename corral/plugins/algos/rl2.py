"""``algo=rl2_ppo``: RL2 (Duan et al. 2016) trained with PPO over whole trials.

RL2 meta-learns a recurrent policy: a trial is several episodes on one task (``worker=rl2``),
the policy's hidden state is carried across them, and the objective is the return of the whole
trial, so the policy learns to explore in early episodes and exploit in later ones.

This is :class:`~corral.plugins.algos.ppo.PPO` (same hyperparameters, same clipped surrogate,
value loss, entropy bonus, Adam and gradient clipping) with three changes:

- minibatches are whole trials (padded sequences), and the policy is run over them from a zero
  hidden state (``log_prob_entropy_sequences``), i.e. backpropagation through time;
- the value function is recurrent too (a GRU and an MLP head on the same RL2 observations);
- each epoch's tasks come from a seeded :class:`~corral.meta.tasks.TaskSampler` over the
  meta-train split: one :class:`~corral.meta.tasks.TaskSchedule` per worker (a task per trial).

``meta_evaluate`` (called by the trainer at every evaluation) runs trials on the held-out
meta-test tasks and reports the adaptation curve ``meta_eval/return_ep{i}``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.evaluation import TrialEvaluation
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.meta.meta_eval import EVALUATING, adaptation_stats, meta_test_plan
from corral.meta.tasks import TaskSampler, TaskSplit, schedule_length
from corral.plugins.algos.ppo import PPO, PPOConfig
from corral.rl.networks import flat_dim, mlp
from corral.rl.returns import gae


@dataclass
class RL2PPOConfig(PPOConfig):
    """PPO hyperparameters plus the meta-RL task split and meta-evaluation settings."""

    minibatch_size: int = field(default=1000, metadata=check(
        ge=2, help="steps per gradient step, rounded to whole trials of the batch's mean length (at least one)"))
    vf_hidden_sizes: list[int] = field(
        default_factory=lambda: [64, 64], metadata=check(ge=1, help="value network: GRU width, then MLP head widths")
    )
    n_train_tasks: int = field(default=1000, metadata=check(ge=1, help="meta-train tasks (drawn once with task_seed)"))
    n_test_tasks: int = field(
        default=50, metadata=check(ge=0, help="held-out meta-test tasks, disjoint from the meta-train ones (0: evaluate on meta-train tasks)")
    )
    task_seed: int = field(default=0, metadata=check(ge=0, help="seed of the task split (independent of the run's seed)"))
    # meta_evaluate runs within the trainer's evaluation only: without it the meta_eval_* settings change nothing
    meta_eval_trials: int = field(default=2, metadata=check(
        ge=1, applies_if=EVALUATING, help="trials per meta-test task at each evaluation"))
    normalize_values: bool = field(
        default=True, metadata={"help": "fit the value function to returns standardised by their running mean and std"}
    )
    meta_eval_deterministic: bool = field(
        default=False, metadata=check(applies_if=EVALUATING, help="meta-evaluate with the policy's mode instead of sampling")
    )


class RecurrentValue(nn.Module):
    """V(history): a GRU over the observation sequence, then an MLP head; ``[B, T, D] -> [B, T]``."""

    def __init__(self, obs_dim: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ConfigError("algo.vf_hidden_sizes needs at least one width (the GRU's)")
        self.gru = nn.GRU(obs_dim, int(hidden_sizes[0]), batch_first=True)
        self.head = mlp(int(hidden_sizes[0]), list(hidden_sizes[1:]), 1, "tanh", out_gain=1.0)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Values of every prefix of each sequence."""
        b, t = observations.shape[:2]
        hidden, _ = self.gru(observations.reshape(b, t, -1).float())
        return self.head(hidden).squeeze(-1)


class RL2PPO(PPO):
    """RL2 with PPO. ``RL2PPO(env_spec, gru_policy, sampler, **RL2PPOConfig fields)``."""

    #: Read by composition checks: needs ``worker=rl2`` and trains recurrent policies.
    needs_trials = True
    workers = ("rl2",)
    trains_recurrent = True
    accepts_fragments = False  # a trial's recurrent state runs over whole episodes
    config: RL2PPOConfig  # PPO's config, with RL2's fields

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        config = RL2PPOConfig(**hyperparameters)
        if not hasattr(policy, "log_prob_entropy_sequences"):
            raise ConfigError(f"algo=rl2_ppo needs a recurrent policy (policy=gru), got {type(policy).__name__}")
        ppo_fields = {f.name for f in dataclasses.fields(PPOConfig)}
        super().__init__(env_spec, policy, sampler, seed=seed,
                         **{k: v for k, v in dataclasses.asdict(config).items() if k in ppo_fields})
        self.config = config
        self.value_function = RecurrentValue(flat_dim(env_spec.observation_space.shape), list(config.vf_hidden_sizes))
        self.optimizers["adam"] = torch.optim.Adam(self.parameters(), lr=config.learning_rate, eps=1e-5)
        self.split = TaskSplit(config.n_train_tasks, config.n_test_tasks, config.task_seed)
        self.task_sampler = TaskSampler(self.split, seed=seed)
        self.return_stats = np.array([0.0, 1.0, 0.0])  # running mean, variance and count of the returns

    def _value_scale(self) -> tuple[float, float]:
        """(mean, std) that turn the value network's output into a value."""
        if not self.config.normalize_values or self.return_stats[2] == 0:
            return 0.0, 1.0
        return float(self.return_stats[0]), float(np.sqrt(self.return_stats[1]) + 1e-8)

    def _update_return_stats(self, returns: np.ndarray) -> None:
        """Merge a batch of returns into the running mean and variance (parallel-variance formula)."""
        mean, var, count = self.return_stats
        b_mean, b_var, b_count = float(returns.mean()), float(returns.var()), len(returns)
        total = count + b_count
        delta = b_mean - mean
        new_var = (var * count + b_var * b_count + delta**2 * count * b_count / total) / total
        self.return_stats = np.array([mean + delta * b_count / total, new_var, total])

    def state_dict(self) -> dict[str, Any]:
        """PPO's state plus the running return statistics."""
        state = super().state_dict()
        state["return_stats"] = self.return_stats.copy()
        return state

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.return_stats = np.array(state.get("return_stats", (0.0, 1.0, 0.0)), dtype=np.float64)

    # ------------------------------------------------------------------ sampling
    def sample(self, itr: int, batch_size: int) -> EpisodeBatch:
        """Trials totalling at least ``batch_size`` steps, each on a meta-train task of this epoch."""
        if self.sampler is None:
            raise RuntimeError("RL2PPO has no sampler; pass sampler= when building it")
        n_workers = self.sampler.worker_factory.n_workers
        env_update = self.task_sampler.env_updates(itr, n_workers, self.tasks_per_worker(batch_size))
        return self.sampler.obtain_samples(itr, batch_size, self.get_agent_update(), env_update)

    def tasks_per_worker(self, batch_size: int) -> int:
        """Length of each worker's task schedule: enough for every trial of a ``batch_size`` epoch
        when episodes run to their limit (the schedule repeats if early ends need more)."""
        assert self.sampler is not None
        factory = self.sampler.worker_factory
        args = factory.worker_args
        trial = int(args.get("n_episodes_per_trial", 1)) * int(self.env_spec.max_episode_length or 1)
        return schedule_length(batch_size, factory.n_workers, trial, int(args.get("n_envs", 1)))

    # ------------------------------------------------------------------ training
    def process(self, episodes: EpisodeBatch) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Padded ``[n_trials, T, ...]`` tensors and GAE advantages over each whole trial."""
        n, lengths = episodes.n_episodes, episodes.lengths
        t_max = int(lengths.max())
        rows = np.arange(n)
        obs = episodes.observations.reshape(len(episodes), -1).astype(np.float32)
        obs_ext = np.zeros((n, t_max + 1, obs.shape[1]), dtype=np.float32)  # each trial + its last observation
        valid = episodes.valids(t_max)
        obs_ext[:, :t_max][valid] = obs
        obs_ext[rows, lengths] = episodes.last_observations.reshape(n, -1)
        obs_t = torch.from_numpy(obs_ext)
        mean, std = self._value_scale()
        with torch.no_grad():
            values_ext = self.value_function(obs_t).numpy().astype(np.float64) * std + mean
        values = values_ext[:, :t_max][valid]
        last_values = values_ext[rows, lengths]
        advantages, returns = gae(episodes, values, last_values, self.discount, self.gae_lambda)
        if self.config.normalize_values:
            self._update_return_stats(returns)
        mean, std = self._value_scale()
        targets = (returns - mean) / std
        log_prob = episodes.agent_infos["log_prob"].astype(np.float32)
        return {
            "observations": obs_t[:, :t_max],
            "actions": torch.from_numpy(episodes.pad(episodes.actions, t_max)),
            "valid": torch.from_numpy(valid),
            "old_log_prob": torch.from_numpy(episodes.pad(log_prob, t_max)),
            "advantages": torch.from_numpy(episodes.pad(advantages.astype(np.float32), t_max)),
            "returns": torch.from_numpy(episodes.pad(targets.astype(np.float32), t_max)),
            "values": torch.as_tensor(values, dtype=torch.float32),
            "returns_flat": torch.as_tensor(returns, dtype=torch.float32),
        }

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """``n_epochs`` passes of PPO over shuffled minibatches of whole trials (``minibatch_size`` steps
        rounded to whole trials; one ``corral: warning:`` line when the rounding, or a value above the batch's
        steps, makes every gradient step use the whole batch, or a minibatch one trial)."""
        c = self.config
        learning_rate = self.scheduled_learning_rate()
        data = self.process(episodes)
        n = episodes.n_episodes
        starts = self.minibatch_starts("minibatch_size", c.minibatch_size, len(episodes), trials=n)
        per_batch = starts.step  # trials per minibatch
        stats: dict[str, list[float]] = {}
        for _ in range(c.n_epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            stop = False
            for start in starts:
                idx = order[start : start + per_batch]
                mask = data["valid"][idx]
                log_prob, entropy = self.policy.log_prob_entropy_sequences(  # type: ignore[attr-defined]
                    data["observations"][idx], data["actions"][idx])
                values = self.value_function(data["observations"][idx])
                stop = self.clipped_step(data["advantages"][idx][mask], log_prob[mask],
                                         data["old_log_prob"][idx][mask], values[mask],
                                         data["returns"][idx][mask], entropy[mask], stats)
                if stop:
                    break
            if stop:
                break
        returns = episodes.episode_returns
        return {
            **self.summarize(stats), **learning_rate,
            "ppo/explained_variance": self.explained_variance(data["values"], data["returns_flat"]),
            "rl2/trial_return": float(returns.mean()),
            "rl2/n_trials": float(n),
        }

    # ------------------------------------------------------------------ meta-evaluation
    def meta_evaluate(self, env: Any, *, seed: int) -> dict[str, float]:
        """Adaptation curve on the held-out meta-test tasks: ``meta_eval/return_ep{i}`` (mean return
        of the i-th episode of a trial) and ``meta_eval/trial_return``."""
        trials = self.meta_test(env, seed=seed)
        return adaptation_stats(trials)

    def meta_test(self, env: Any, *, seed: int, trials_per_task: int | None = None, which: str = "test"
                  ) -> EpisodeBatch:
        """Trials of the current policy on every meta-test task (the same seeds every call)."""
        return self.held_out_evaluation(env, seed=seed, trials_per_task=trials_per_task, which=which).run(env)

    def held_out_evaluation(self, env: Any, *, seed: int, n_trials: int | None = None,
                            deterministic: bool | None = None, n_workers: int = 1,
                            trials_per_task: int | None = None, which: str = "test") -> TrialEvaluation:
        """The meta-test as a :class:`~corral.framework.evaluation.TrialEvaluation`: what
        :meth:`meta_evaluate` runs, and ``corral eval`` of the run (``n_trials``: trials cycling
        through the held-out tasks in its order; ``deterministic``: None for algo.meta_eval_deterministic)."""
        from corral.plugins.workers.rl2 import RL2Worker

        factory = self.sampler.worker_factory if self.sampler is not None else None
        worker_class = factory.worker_class if factory is not None else RL2Worker
        worker_args = dict(factory.worker_args) if factory is not None else {}
        per_trial = worker_args.get("n_episodes_per_trial")
        if per_trial is None:  # the worker's own default (a worker class without the setting: one episode a trial)
            setting = inspect.signature(worker_class).parameters.get("n_episodes_per_trial")  # type: ignore[arg-type]  # a Worker class
            per_trial = 1 if setting is None or setting.default is inspect.Parameter.empty else setting.default
        return meta_test_plan(
            self.policy, env, split=self.split, worker_class=worker_class,  # type: ignore[arg-type]
            worker_args=worker_args,
            max_episode_length=factory.max_episode_length if factory is not None else self.env_spec.max_episode_length,
            seed=seed, statistics=adaptation_stats, trials_per_task=trials_per_task or self.config.meta_eval_trials,
            deterministic=self.config.meta_eval_deterministic if deterministic is None else deterministic,
            which=which, episodes_per_trial=int(per_trial), n_trials=n_trials, n_workers=n_workers,
        )


def build_rl2_ppo(config: RL2PPOConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> RL2PPO:
    """Build RL2-PPO from its config."""
    return RL2PPO(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


#: What the factory builds, so corral's composition checks read its ``needs_trials``, ``workers`` ...
build_rl2_ppo.component_class = RL2PPO  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=rl2_ppo``."""
    register("algo", "rl2_ppo", build_rl2_ppo, config=RL2PPOConfig,
             help="RL2: PPO over whole trials with a recurrent policy (needs worker=rl2, policy=gru)")
