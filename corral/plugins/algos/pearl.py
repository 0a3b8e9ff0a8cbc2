"""``algo=pearl``: PEARL (Rakelly et al. 2019), off-policy meta-RL with probabilistic context variables.

PEARL learns a posterior ``q(z | context)`` over a latent task variable and a SAC agent
conditioned on ``z``. Each epoch:

1. **Collect.** Each worker (``worker=pearl``) runs trials on meta-train tasks drawn by a seeded
   :class:`~corral.meta.tasks.TaskSampler`: the first ``worker.n_prior_episodes`` episodes of a
   trial act with ``z`` from the prior, the later ones with ``z`` from the posterior over the
   trial's context (plus, with ``collect_context_size``, transitions drawn from the task's
   context buffer, as PEARL's reference code collects data). Every episode goes into its task's
   RL replay buffer; the episodes chosen by ``context_from`` (the prior ones by default, as in the
   paper) go into its task's context buffer, with the context reward
   (``env_infos["context_reward"]``).
2. **Train**, once the buffers hold ``min_buffer_size`` transitions: each gradient step draws
   ``meta_batch`` tasks; for each, ``context_size`` context transitions give the posterior
   ``N(mu, sigma^2)`` (product of Gaussian factors) and a reparameterised ``z``, and
   ``batch_size`` RL transitions feed SAC on ``[observation, z]``:

   - critic: twin Q on ``[o, a, z]`` towards ``reward_scale * r + gamma * (1 - terminal) *
     (min Q_target(o', a', z) - alpha log pi(a' | o', z))``; its gradient *also trains the
     encoder*, together with ``kl_lambda * KL(q(z | c) || N(0, I))`` summed over the tasks;
   - actor: ``alpha log pi(a | o, z) - min Q(o, a, z)`` with ``z`` detached;
   - temperature: automatic entropy tuning (as ``algo=sac``); Polyak-averaged target critics.

``meta_evaluate`` runs ``meta_eval_episodes`` episodes on every held-out meta-test task, the
posterior updated after each, and logs the adaptation curve ``meta_eval/return_ep{i}`` (episode 0
acts on the prior, episode ``i`` on the posterior over episodes ``0 .. i-1``), and, when the
encoder sees another reward, ``meta_eval/context_return_ep{i}``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from corral import hookimpl
from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec, child_seed
from corral.framework.errors import ConfigError
from corral.framework.evaluation import TrialEvaluation
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.meta.context_encoder import kl_to_standard_normal
from corral.meta.meta_eval import EVALUATING, curve_stats, meta_test_plan, pearl_episode_returns
from corral.meta.task_replay import TaskReplayBuffers
from corral.meta.tasks import TaskSampler, TaskSplit, schedule_length
from corral.rl.networks import flat_dim, mlp
from corral.rl.off_policy import (
    TORCH_BRANCH,
    gradient_steps_due,
    load_networks_state,
    networks_state,
    polyak_update,
)

#: Spawn-key branches of PEARL's buffers and task draws (workers use 0, 1, ...).
RL_BUFFER_BRANCH = 2**31 - 5
CONTEXT_BUFFER_BRANCH = 2**31 - 6
TASK_DRAW_BRANCH = 2**31 - 7
CONTEXT_FROM = ("prior", "all")


@dataclass
@checked("algo")
class PEARLConfig:
    """PEARL hyperparameters (the paper's values where it gives them: ``kl_lambda`` 0.1, ``meta_batch``
    16, ``batch_size`` 256, ``discount`` 0.99, ``tau`` 0.005, learning rates 3e-4, Q widths 3 x 300)."""

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    tau: float = field(default=0.005, metadata=check(gt=0, le=1, help="Polyak coefficient of the target Q networks"))
    learning_rate: float = field(default=3e-4, metadata=check(gt=0, help="Adam learning rate (actor, critics, temperature)"))
    encoder_learning_rate: float = field(default=3e-4, metadata=check(gt=0, help="Adam learning rate of the context encoder"))
    kl_lambda: float = field(default=0.1, metadata=check(ge=0, help="weight of KL(q(z|c) || N(0, I)) in the encoder loss"))
    reward_scale: float = field(default=1.0, metadata=check(gt=0, help="multiplies rewards in the critic target"))
    meta_batch: int = field(default=16, metadata=check(ge=1, help="tasks per gradient step"))
    batch_size: int = field(default=256, metadata=check(ge=1, help="RL transitions per task per gradient step"))
    context_size: int = field(default=100, metadata=check(ge=1, help="context transitions per task per gradient step"))
    context_from: str = field(default="prior", metadata=check(choices=("prior", "all"), help="episodes feeding the context buffers: prior or all"))
    collect_context_size: int = field(
        default=0,
        metadata=check(ge=0, help="transitions from a task's context buffer that each training trial starts its context with, "
                          "so its posterior episodes act on what is known about the task, as PEARL's reference code "
                          "collects data (0: the trial's own episodes only; meta-test trials always start empty)"),
    )
    buffer_size: int = field(default=100_000, metadata=check(ge=1, help="capacity of each task's RL and context buffers"))
    min_buffer_size: int = field(default=1000, metadata=check(ge=0, le_field="buffer_size", help="RL transitions collected before gradient steps start"))
    utd_ratio: float = field(default=0.5, metadata=check(gt=0, applies_if=("gradient_steps", "==", None),
                                                         help="gradient steps per new environment step"))
    gradient_steps: Optional[int] = field(
        default=None, metadata=check(ge=0, help="fixed gradient steps per epoch, overriding utd_ratio when set (0: collect without training)")
    )
    auto_entropy: bool = field(default=True, metadata={"help": "learn the temperature alpha to reach target_entropy"})
    initial_alpha: float = field(default=1.0, metadata=check(gt=0, help="starting temperature (fixed one when auto_entropy=false)"))
    target_entropy: Optional[float] = field(default=None, metadata=check(applies_if=("auto_entropy", "==", True),
                                                                       help="entropy target (null: -action_dim)"))
    qf_hidden_sizes: list[int] = field(default_factory=lambda: [300, 300, 300], metadata=check(ge=1, help="Q network widths"))
    n_train_tasks: int = field(default=100, metadata=check(ge=1, help="meta-train tasks (drawn once with task_seed)"))
    n_test_tasks: int = field(default=30, metadata=check(ge=0, help="held-out meta-test tasks (0: meta-test on meta-train tasks)"))
    task_seed: int = field(default=0, metadata=check(ge=0, help="seed of the task split (independent of the run's seed)"))
    # meta_evaluate runs within the trainer's evaluation only: without it these change nothing
    meta_eval_episodes: int = field(default=3, metadata=check(
        ge=1, applies_if=EVALUATING, help="episodes per meta-test task (posterior updated after each)"))
    meta_eval_trials: int = field(default=1, metadata=check(
        ge=1, applies_if=EVALUATING, help="trials per meta-test task at each evaluation"))
    meta_eval_deterministic: bool = field(default=True, metadata=check(
        applies_if=EVALUATING, help="meta-evaluate with mean actions"))
    meta_eval_sample_z: bool = field(default=True, metadata=check(
        applies_if=EVALUATING, help="meta-evaluate with z drawn from the prior/posterior (false: their mean)"))


class PEARL(Algorithm):
    """PEARL. ``PEARL(env_spec, pearl_policy, sampler, **PEARLConfig fields)``; see the module docstring."""

    #: Read by composition checks.
    needs_latent_worker = True
    workers = ("pearl",)
    policies = ("pearl",)
    action_spaces = ("continuous",)
    presets = ("pearl_pointnav",)  # named in the composition errors (corral.plugins.validation)

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = c = PEARLConfig(**hyperparameters)
        if not hasattr(policy, "sample_z"):
            raise ConfigError(f"algo=pearl trains a PEARL agent, got {type(policy).__name__}; choose policy=pearl")
        for name in ("meta_batch", "batch_size", "context_size", "meta_eval_episodes", "meta_eval_trials"):
            if getattr(c, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(c, name)}")
        if c.collect_context_size < 0:
            raise ConfigError(f"algo.collect_context_size must be >= 0, got {c.collect_context_size}")
        if c.context_from not in CONTEXT_FROM:
            raise ConfigError(f"algo.context_from must be one of {CONTEXT_FROM}, got {c.context_from!r}")
        if not 0 < c.tau <= 1:
            raise ConfigError(f"algo.tau must be in (0, 1], got {c.tau}")
        if c.gradient_steps is None and not c.utd_ratio > 0:
            raise ConfigError(f"algo.utd_ratio must be > 0 (or set algo.gradient_steps), got {c.utd_ratio}")
        if c.initial_alpha <= 0:
            raise ConfigError(f"algo.initial_alpha must be > 0, got {c.initial_alpha}")
        self.env_spec = env_spec
        self.policy = policy
        self.sampler = sampler
        self.seed = int(seed)
        obs_dim = flat_dim(env_spec.observation_space.shape)
        act_dim = flat_dim(env_spec.action_space.shape)
        latent = int(policy.latent_dim)  # type: ignore[attr-defined]
        self.qf1 = mlp(obs_dim + act_dim + latent, c.qf_hidden_sizes, 1, "relu")
        self.qf2 = mlp(obs_dim + act_dim + latent, c.qf_hidden_sizes, 1, "relu")
        self.target_qf1 = copy.deepcopy(self.qf1).requires_grad_(False)
        self.target_qf2 = copy.deepcopy(self.qf2).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(c.initial_alpha)), requires_grad=c.auto_entropy)
        self.target_entropy = float(-act_dim if c.target_entropy is None else c.target_entropy)
        self.modules: dict[str, nn.Module] = {
            "policy": policy, "qf1": self.qf1, "qf2": self.qf2,  # type: ignore[dict-item]
            "target_qf1": self.target_qf1, "target_qf2": self.target_qf2,
        }
        encoder, actor = policy.encoder, policy.actor  # type: ignore[attr-defined]
        self.optimizers: dict[str, torch.optim.Optimizer] = {
            "actor": torch.optim.Adam(actor.parameters(), lr=c.learning_rate),
            "qf": torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=c.learning_rate),
            "encoder": torch.optim.Adam(encoder.parameters(), lr=c.encoder_learning_rate),
        }
        if c.auto_entropy:
            self.optimizers["alpha"] = torch.optim.Adam([self.log_alpha], lr=c.learning_rate)
        root = np.random.SeedSequence(seed)
        self.rl_buffers = TaskReplayBuffers(c.buffer_size, child_seed(root, RL_BUFFER_BRANCH))
        self.context_buffers = TaskReplayBuffers(c.buffer_size, child_seed(root, CONTEXT_BUFFER_BRANCH))
        self.task_rng = np.random.Generator(np.random.PCG64(child_seed(root, TASK_DRAW_BRANCH)))
        self.torch_rng = torch.Generator().manual_seed(
            int(child_seed(root, TORCH_BRANCH).generate_state(1, np.uint64)[0] >> 1))
        self.split = TaskSplit(c.n_train_tasks, c.n_test_tasks, c.task_seed)
        self.task_sampler = TaskSampler(self.split, seed=seed)
        self.env_steps = 0
        self.n_updates = 0
        self._update_credit = 0.0

    # ------------------------------------------------------------------ sampling
    def sample(self, itr: int, batch_size: int) -> EpisodeBatch:
        """Trials totalling at least ``batch_size`` steps, each on a meta-train task of this epoch."""
        if self.sampler is None:
            raise RuntimeError("PEARL has no sampler; pass sampler= when building it")
        factory = self.sampler.worker_factory
        args = factory.worker_args
        trial = int(args.get("n_episodes_per_trial", 3)) * int(self.env_spec.max_episode_length or 1)
        n_tasks = schedule_length(batch_size, factory.n_workers, trial, int(args.get("n_envs", 1)))
        env_update = self.task_sampler.env_updates(itr, factory.n_workers, n_tasks)
        if self.config.collect_context_size > 0:
            env_update = [dataclasses.replace(s, contexts=tuple(self.known_context(self.split.task_id(s.which, i))
                                                                 for i in s.indices)) for s in env_update]
        return self.sampler.obtain_samples(itr, batch_size, self.get_agent_update(), env_update)

    def known_context(self, task_id: int) -> dict[str, np.ndarray] | None:
        """``collect_context_size`` transitions drawn from the task's context buffer (None while it has none)."""
        if task_id not in self.context_buffers.task_ids:
            return None
        drawn = self.context_buffers.sample([task_id], self.config.collect_context_size)
        return {k: drawn[k][0] for k in ("observations", "actions", "rewards")}

    # ------------------------------------------------------------------ training
    @property
    def learning_started(self) -> bool:
        """True once the RL buffers hold ``min_buffer_size`` transitions."""
        return len(self.rl_buffers) >= max(self.config.min_buffer_size, 1)

    def n_gradient_steps(self, n_new: int) -> int:
        """Gradient steps for ``n_new`` fresh environment steps (0 before learning starts)."""
        if not self.learning_started:
            return 0
        steps, self._update_credit = gradient_steps_due(self._update_credit, n_new, self.config.utd_ratio,
                                                        self.config.gradient_steps)
        return steps

    def store(self, episodes: EpisodeBatch) -> None:
        """Every episode into its task's RL buffer; the ``context_from`` ones, with the context
        reward, into its task's context buffer."""
        self.rl_buffers.add(episodes)
        context = dataclasses.replace(episodes, rewards=episodes.env_infos["context_reward"])
        if self.config.context_from == "prior":
            keep = episodes.episode_infos["pearl_posterior"] == 0
            if not keep.any():
                raise ConfigError(
                    "algo.context_from=prior, but no episode acted on the prior; set worker.n_prior_episodes >= 1 "
                    "or algo.context_from=all"
                )
            parts = context.split()
            context = EpisodeBatch.concatenate(*[p for p, k in zip(parts, keep) if k])
        self.context_buffers.add(context)

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """Store the epoch's episodes, then run its gradient steps."""
        self.store(episodes)
        self.env_steps += len(episodes)
        history: dict[str, list[float]] = {}
        for _ in range(self.n_gradient_steps(len(episodes))):
            for k, v in self.gradient_step(self.sample_tasks()).items():
                history.setdefault(k, []).append(float(v))
            self.n_updates += 1
        out = {k: float(np.mean(v)) for k, v in history.items()}
        out.update({
            "pearl/alpha": float(self.log_alpha.detach().exp()),
            "pearl/n_tasks_seen": float(len(self.rl_buffers.task_ids)),
            "replay/size": float(len(self.rl_buffers)),
            "replay/n_updates": float(self.n_updates),
        })
        return out

    def sample_tasks(self) -> dict[str, torch.Tensor]:
        """One meta-batch: ``meta_batch`` tasks (with context) and their RL and context transitions as
        ``[tasks, n, ...]`` tensors."""
        c = self.config
        candidates = [t for t in self.context_buffers.task_ids if t in self.rl_buffers.buffers]
        tasks = self.task_rng.choice(np.asarray(candidates), size=c.meta_batch, replace=len(candidates) < c.meta_batch)
        rl = self.rl_buffers.sample(tasks, c.batch_size)
        ctx = self.context_buffers.sample(tasks, c.context_size)
        t, n = ctx["rewards"].shape
        features = self.policy.context_features(  # type: ignore[attr-defined]
            ctx["observations"].reshape(t * n, -1), ctx["actions"].reshape(t * n, -1), ctx["rewards"].reshape(-1))
        out = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in rl.items()
               if k != "step_types"}
        out["context"] = torch.from_numpy(features.reshape(t, n, -1))
        return out

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor, z: torch.Tensor, target: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Both Q networks (or their targets) on ``[observation, action in [-1, 1], z]``."""
        x = torch.cat([obs, actions, z], dim=1)
        q1, q2 = (self.target_qf1, self.target_qf2) if target else (self.qf1, self.qf2)
        return q1(x).squeeze(-1), q2(x).squeeze(-1)

    def gradient_step(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Temperature, critic + encoder and actor steps on one meta-batch, then the target update."""
        c = self.config
        policy: Any = self.policy
        n_tasks, n = batch["rewards"].shape
        mean, var = policy.encoder(batch["context"])
        eps = torch.randn(mean.shape, generator=self.torch_rng)
        z = mean + var.sqrt() * eps
        kl = kl_to_standard_normal(mean, var).sum()
        z_rows = z.unsqueeze(1).expand(n_tasks, n, z.shape[-1]).reshape(n_tasks * n, -1)
        z_fixed = z_rows.detach()
        obs = batch["observations"].reshape(n_tasks * n, -1)
        next_obs = batch["next_observations"].reshape(n_tasks * n, -1)
        actions = policy.unscale_actions(batch["actions"].reshape(n_tasks * n, -1))
        rewards, terminals = batch["rewards"].reshape(-1), batch["terminals"].reshape(-1)
        new_actions, log_prob = policy.rsample(obs, z_fixed, self.torch_rng)

        alpha = self.log_alpha.detach().exp()
        stats: dict[str, float] = {}
        if c.auto_entropy:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.optimizers["alpha"].zero_grad()
            alpha_loss.backward()
            self.optimizers["alpha"].step()
            stats["loss/alpha"] = alpha_loss.item()

        with torch.no_grad():
            next_actions, next_log_prob = policy.rsample(next_obs, z_fixed, self.torch_rng)
            tq1, tq2 = self.q_values(next_obs, next_actions, z_fixed, target=True)
            target_q = c.reward_scale * rewards + c.discount * (1.0 - terminals) * (
                torch.min(tq1, tq2) - alpha * next_log_prob)
        q1, q2 = self.q_values(obs, actions, z_rows)
        qf_loss = 0.5 * (F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q))
        self.optimizers["qf"].zero_grad()
        self.optimizers["encoder"].zero_grad()
        (qf_loss + c.kl_lambda * kl).backward()
        self.optimizers["qf"].step()
        self.optimizers["encoder"].step()

        pq1, pq2 = self.q_values(obs, new_actions, z_fixed)
        policy_loss = (alpha * log_prob - torch.min(pq1, pq2)).mean()
        self.optimizers["actor"].zero_grad()
        policy_loss.backward()
        self.optimizers["actor"].step()

        polyak_update([*self.qf1.parameters(), *self.qf2.parameters()],
                      [*self.target_qf1.parameters(), *self.target_qf2.parameters()], c.tau)
        stats.update({
            "loss/qf": qf_loss.item(),
            "loss/policy": policy_loss.item(),
            "loss/kl": kl.item() / n_tasks,
            "pearl/q_mean": q1.detach().mean().item(),
            "pearl/entropy": -log_prob.detach().mean().item(),
            "pearl/z_variance": var.detach().mean().item(),
        })
        return stats

    # ------------------------------------------------------------------ meta-evaluation
    def meta_evaluate(self, env: Any, *, seed: int) -> dict[str, float]:
        """Adaptation curve on the held-out meta-test tasks: ``meta_eval/return_ep{i}`` (episode 0 on
        the prior, episode i on the posterior over episodes 0..i-1) and ``meta_eval/context_return_ep{i}``."""
        return self.meta_statistics(self.meta_test(env, seed=seed))

    @staticmethod
    def meta_statistics(episodes: EpisodeBatch) -> dict[str, float]:
        """The ``meta_eval/...`` statistics of a meta-test's episodes (whole trials, in order)."""
        returns = pearl_episode_returns(episodes)
        stats = curve_stats(returns)
        stats["meta_eval/return_prior"] = float(returns[:, 0].mean())
        if returns.shape[1] > 1:
            stats["meta_eval/return_posterior"] = float(returns[:, 1:].mean())
        context_returns = pearl_episode_returns(episodes, episodes.env_infos["context_reward"])
        if not np.array_equal(context_returns, returns):
            stats.update(curve_stats(context_returns, name="context_return"))
        stats["meta_eval/n_trials"] = float(len(returns))
        return stats

    def meta_test(self, env: Any, *, seed: int, trials_per_task: int | None = None, which: str = "test",
                  n_episodes: int | None = None, deterministic: bool | None = None) -> EpisodeBatch:
        """Trials of ``n_episodes`` (default ``meta_eval_episodes``) episodes on every meta-test task
        (the same seeds every call), one prior episode first."""
        return self.held_out_evaluation(env, seed=seed, trials_per_task=trials_per_task, which=which,
                                        n_episodes=n_episodes, deterministic=deterministic).run(env)

    def held_out_evaluation(self, env: Any, *, seed: int, n_trials: int | None = None,
                            deterministic: bool | None = None, n_workers: int = 1,
                            trials_per_task: int | None = None, which: str = "test",
                            n_episodes: int | None = None) -> TrialEvaluation:
        """The meta-test as a :class:`~corral.framework.evaluation.TrialEvaluation`: what
        :meth:`meta_evaluate` runs, and ``corral eval`` of the run (``n_trials``: trials cycling
        through the held-out tasks in its order; ``deterministic``: None for algo.meta_eval_deterministic)."""
        from corral.plugins.workers.pearl import PEARLWorker

        c = self.config
        factory = self.sampler.worker_factory if self.sampler is not None else None
        worker_class = factory.worker_class if factory is not None else PEARLWorker
        n_episodes = n_episodes or c.meta_eval_episodes
        worker_args = {**(dict(factory.worker_args) if factory is not None else {}),
                       "n_episodes_per_trial": n_episodes, "n_prior_episodes": 1}
        agent = copy.deepcopy(self.policy)
        agent.explore_z = c.meta_eval_sample_z  # type: ignore[attr-defined]
        return meta_test_plan(
            agent, env, split=self.split, worker_class=worker_class,  # type: ignore[arg-type]
            worker_args=worker_args,
            max_episode_length=factory.max_episode_length if factory is not None else self.env_spec.max_episode_length,
            seed=seed, statistics=self.meta_statistics, trials_per_task=trials_per_task or c.meta_eval_trials,
            deterministic=c.meta_eval_deterministic if deterministic is None else deterministic,
            which=which, episodes_per_trial=n_episodes, rows_per_trial=n_episodes, n_trials=n_trials,
            n_workers=n_workers,
        )

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimisers, both sets of per-task buffers, RNG states, counters, the temperature."""
        return {
            **networks_state(self.modules, self.optimizers),
            "rl_buffers": self.rl_buffers.state_dict(),
            "context_buffers": self.context_buffers.state_dict(),
            "task_rng": self.task_rng.bit_generator.state,
            "torch_rng": self.torch_rng.get_state(),
            "log_alpha": self.log_alpha.detach().clone(),
            "env_steps": self.env_steps,
            "n_updates": self.n_updates,
            "update_credit": self._update_credit,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        load_networks_state(self.modules, self.optimizers, state)
        self.rl_buffers.load_state_dict(state["rl_buffers"])
        self.context_buffers.load_state_dict(state["context_buffers"])
        self.task_rng.bit_generator.state = state["task_rng"]
        self.torch_rng.set_state(state["torch_rng"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.env_steps = int(state["env_steps"])
        self.n_updates = int(state["n_updates"])
        self._update_credit = float(state["update_credit"])


def build_pearl(config: PEARLConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> PEARL:
    """Build PEARL from its config."""
    return PEARL(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


build_pearl.component_class = PEARL  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=pearl``."""
    register("algo", "pearl", build_pearl, config=PEARLConfig,
             help="PEARL: context encoder posterior over z + SAC on [obs, z] (needs worker=pearl, policy=pearl)")


__all__ = ["PEARL", "PEARLConfig", "build_pearl"]
