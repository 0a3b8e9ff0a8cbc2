"""``algo=dqn``: Deep Q-Network (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016).

Read top to bottom: hyperparameters, the epsilon schedule (linear from ``exploration_initial_eps``
to ``exploration_final_eps`` over ``exploration_steps`` environment steps counted from step 0, the
warm-up's included, as SB3 counts them; 1 until the buffer holds ``min_buffer_size`` transitions),
the target network update (every ``target_update_interval`` environment steps, Polyak with ``tau``;
``tau=1`` is the classic hard copy; in whole epochs, before an epoch's gradient steps), the warning
lines a fresh run gives when those options are not what its epochs run, then
:meth:`DQN.gradient_step`: the Huber loss between ``Q(s, a)`` and
``r + gamma * (1 - terminal) * Q_target(s', argmax_a' Q(s', a'))`` (double DQN; with ``double=false``
``max_a' Q_target(s', a')``), bootstrapping on TIMEOUT and fragment ends, not on TERMINAL. Discrete
actions only; the policy is ``policy=qnet`` (``policy.dueling=true`` for the dueling head), and
evaluation acts greedily.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch
import torch.nn.functional as F

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.off_policy import OffPolicyAlgorithm, largest_divisor, polyak_update, warmup_steps

#: What ``algo.target_update_interval`` null (the default) stands for: SB3's default, counted in whole
#: epochs like any value (and, not given by the user, never warned about).
DEFAULT_TARGET_UPDATE_INTERVAL = 10_000


@dataclass
@checked("algo")
class DQNConfig:
    """DQN hyperparameters. Defaults mirror Stable-Baselines3's ``DQN``:

    ``learning_rate`` = SB3 ``learning_rate`` (1e-4), ``buffer_size`` = ``buffer_size`` (1e6),
    ``min_buffer_size`` ~ ``learning_starts`` (100; see below), ``batch_size`` = ``batch_size`` (32),
    ``tau`` = ``tau`` (1.0), ``discount`` = ``gamma`` (0.99), ``utd_ratio`` = ``gradient_steps / train_freq``
    (1 / 4), ``gradient_steps`` ~ ``gradient_steps`` per epoch, ``target_update_interval`` ~
    ``target_update_interval`` (10,000 environment steps; see below), ``exploration_initial_eps`` /
    ``exploration_final_eps`` = the same names (1.0 / 0.05), ``exploration_steps`` =
    ``exploration_fraction * total_timesteps`` (0.1 * 100,000), ``max_grad_norm`` = ``max_grad_norm``
    (10), Huber loss as SB3's ``smooth_l1_loss``; the network widths are ``policy.hidden_sizes``
    (SB3's ``net_arch``, 64, 64). SB3's DQN is not double DQN: ``double=false`` gives its targets.
    One difference stays: ``policy=qnet`` initialises its layers orthogonally (``corral.rl.networks.mlp``),
    SB3 keeps PyTorch's default ``nn.Linear`` initialisation. And the workers' policy (its epsilon too)
    changes once per epoch (``trainer.batch_size`` steps), so ``min_buffer_size`` rounds up to whole
    epochs at epsilon 1 (a run says so when a given value is not a multiple of the batch). Its default,
    null, stands for SB3's 100 rounded up the same way, without the warning (the user did not ask for
    100 exactly): the first epoch with any ``trainer.batch_size`` of 100 or more. The target network
    is updated likewise between epochs, before an epoch's gradient steps, when the epoch passed a
    multiple of ``target_update_interval`` (at most one hard copy an epoch; several soft updates back to
    back), as SB3 does with ``train_freq`` of one epoch; a run says so when a given value is not a
    multiple of the batch, and the default, null, is SB3's 10,000 without the warning. The epsilon
    schedule counts from step 0 as SB3's does, so the warm-up uses part or all of it (a run says so when
    a given ``exploration_initial_eps`` is never used).
    """

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    learning_rate: float = field(default=1e-4, metadata=check(gt=0, help="Adam learning rate"))
    buffer_size: int = field(default=1_000_000, metadata=check(ge=1, help="replay buffer capacity (transitions)"))
    min_buffer_size: Optional[int] = field(
        default=None, metadata=check(ge=0, le_field="buffer_size", help="transitions collected (epsilon = 1) before gradient steps start, in whole epochs of trainer.batch_size steps, rounded up (a run says so when it is not a multiple); null, the default: SB3's learning_starts of 100, rounded up the same way, without the warning")
    )
    batch_size: int = field(default=32, metadata=check(ge=1, help="transitions per gradient step"))
    utd_ratio: float = field(default=0.25, metadata=check(gt=0, applies_if=("gradient_steps", "==", None),
                                                         help="gradient steps per new environment step"))
    gradient_steps: Optional[int] = field(
        default=None, metadata=check(ge=0, help="fixed gradient steps per epoch, overriding utd_ratio when set (0: collect without training)")
    )
    tau: float = field(default=1.0, metadata=check(gt=0, le=1, help="target update coefficient (1: hard copy)"))
    target_update_interval: Optional[int] = field(
        default=None, metadata=check(ge=1, help="environment steps between target updates, in whole epochs: the target is updated before the gradient steps of each epoch that passes a multiple of it (a run says so when it is not a multiple of trainer.batch_size); null, the default: SB3's 10,000, counted the same way, without the warning")
    )
    exploration_initial_eps: float = field(default=1.0, metadata=check(ge=0, le=1, help="epsilon at step 0 of the schedule, which counts from step 0, warm-up included (a run says so when the schedule ends within the warm-up, leaving it unused)"))
    exploration_final_eps: float = field(default=0.05, metadata=check(ge=0, le=1, help="epsilon at the end of the schedule"))
    exploration_steps: int = field(
        default=10_000, metadata=check(ge=0, help="environment steps over which epsilon falls linearly, counted from step 0 (the warm-up's, at epsilon 1, included)")
    )
    max_grad_norm: float = field(default=10.0, metadata=check(gt=0, help="gradient-norm clip"))
    double: bool = field(default=True, metadata={"help": "double DQN targets (false: max over the target network)"})


class DQN(OffPolicyAlgorithm):
    """Double DQN. ``DQN(env_spec, policy, sampler, **DQNConfig fields)``; ``policy`` is a
    :class:`~corral.plugins.policies.qnet.QNetworkPolicy`."""

    policies = ("qnet",)
    action_spaces = ("discrete",)
    presets = ("dqn_cartpole",)  # named in the composition errors (corral.plugins.validation)
    warmup_actions = "act at epsilon 1 (uniformly random actions)"

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = c = DQNConfig(**hyperparameters)
        if not hasattr(policy, "q_values"):
            raise ConfigError(f"algo=dqn trains a Q-network policy, got {type(policy).__name__}; choose policy=qnet")
        if not env_spec.is_discrete:
            raise ConfigError(
                f"algo=dqn needs a Discrete action space, got {env_spec.action_space}; "
                "for continuous actions use algo=sac policy=tanh_gaussian"
            )
        if c.target_update_interval is not None and c.target_update_interval < 1:
            raise ConfigError(f"algo.target_update_interval must be >= 1, got {c.target_update_interval}")
        if not 0 < c.tau <= 1:
            raise ConfigError(f"algo.tau must be in (0, 1], got {c.tau}")
        for name in ("exploration_initial_eps", "exploration_final_eps"):
            if not 0 <= getattr(c, name) <= 1:
                raise ConfigError(f"algo.{name} must be in [0, 1], got {getattr(c, name)}")
        super().__init__(env_spec, policy, sampler, seed=seed, buffer_size=c.buffer_size,
                         min_buffer_size=c.min_buffer_size, batch_size=c.batch_size, utd_ratio=c.utd_ratio,
                         gradient_steps=c.gradient_steps)
        self.target = copy.deepcopy(policy).requires_grad_(False)  # type: ignore[attr-defined]
        self.modules["target"] = self.target
        self.optimizers["q"] = torch.optim.Adam(policy.parameters(), lr=c.learning_rate)  # type: ignore[attr-defined]
        self.update_exploration(0)
        self._collected_epsilon = float(policy.epsilon)  # type: ignore[attr-defined]  # the last epoch's (logged)

    # ------------------------------------------------------------------ exploration and targets
    def scheduled_epsilon(self, env_steps: int) -> float:
        """The linear schedule's value after ``env_steps`` environment steps, counted from step 0."""
        c = self.config
        frac = min(1.0, env_steps / c.exploration_steps) if c.exploration_steps > 0 else 1.0
        return c.exploration_initial_eps + frac * (c.exploration_final_eps - c.exploration_initial_eps)

    def epsilon(self, env_steps: int) -> float:
        """The exploration rate after ``env_steps`` environment steps: 1 until learning starts, then
        :meth:`scheduled_epsilon` (the warm-up's steps count)."""
        return self.scheduled_epsilon(env_steps) if self.learning_started else 1.0

    def update_exploration(self, env_steps: int) -> None:
        """Write the scheduled epsilon into the policy (it travels in the next agent update)."""
        self.policy.epsilon.fill_(self.epsilon(env_steps))  # type: ignore[attr-defined]

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """:meth:`OffPolicyAlgorithm.train_once`, with ``dqn/epsilon`` the epsilon ``episodes`` were
        collected with (the policy's, read before the epoch's update sets the next epoch's)."""
        self._collected_epsilon = float(self.policy.epsilon)  # type: ignore[attr-defined]
        return super().train_once(itr, episodes)

    def exploration_stats(self) -> dict[str, float]:
        """The epsilon the epoch's episodes were collected with."""
        return {"dqn/epsilon": self._collected_epsilon}

    @property
    def target_update_interval(self) -> int:
        """``algo.target_update_interval``, or :data:`DEFAULT_TARGET_UPDATE_INTERVAL` for null."""
        k = self.config.target_update_interval
        return DEFAULT_TARGET_UPDATE_INTERVAL if k is None else k

    def before_gradient_steps(self, env_steps_before: int, env_steps_after: int) -> None:
        """Update the target network once per ``target_update_interval`` environment steps passed."""
        k = self.target_update_interval
        crossed = env_steps_after // k - env_steps_before // k
        n_updates = min(crossed, 1) if self.config.tau == 1.0 else crossed  # repeated hard copies are one copy
        for _ in range(n_updates):
            polyak_update(list(self.policy.parameters()), list(self.target.parameters()),  # type: ignore[attr-defined]
                          self.config.tau)

    # ------------------------------------------------------------------ what a fresh run says
    def first_epoch_warnings(self, epoch_steps: int) -> list[str]:
        """The warm-up warning, then :meth:`target_update_warning` and :meth:`initial_eps_warning`."""
        lines = super().first_epoch_warnings(epoch_steps)
        for message in (self.target_update_warning(epoch_steps), self.initial_eps_warning(epoch_steps)):
            if message is not None:
                lines.append(message)
        return lines

    def warmup_note(self, steps: int) -> str:
        """How much of the epsilon schedule the ``steps`` warm-up steps use, when
        ``exploration_initial_eps`` is below 1 and the schedule outlasts them (when it does not,
        :meth:`initial_eps_warning` says so)."""
        c = self.config
        if c.exploration_initial_eps >= 1 or c.exploration_steps <= steps:
            return ""
        return (f", and they use the first {steps:,} of the epsilon schedule's {c.exploration_steps:,} steps (it counts "
                f"from step 0, from algo.exploration_initial_eps={c.exploration_initial_eps:g}), so the first learned "
                f"epoch acts at epsilon {self.scheduled_epsilon(steps):.3g}")

    def initial_eps_warning(self, epoch_steps: int) -> str | None:
        """The warning line when a given ``exploration_initial_eps`` (below 1, and not the final value)
        is never acted with: the schedule, counted from step 0, ends within the warm-up's steps (with
        epochs of ``epoch_steps`` steps), or ``exploration_steps`` is 0; None otherwise."""
        c = self.config
        initial, final, length = c.exploration_initial_eps, c.exploration_final_eps, c.exploration_steps
        steps = warmup_steps(self.min_buffer_size, epoch_steps)
        if initial >= 1 or initial == final or length > steps:
            return None
        epochs = steps // epoch_steps
        cause = ("algo.exploration_steps=0 ends the epsilon schedule at step 0" if length == 0 else
                 f"the epsilon schedule counts environment steps from step 0, the warm-up's included, and its "
                 f"algo.exploration_steps={length:,} end within the warm-up")
        return (f"algo.exploration_initial_eps={initial:g} is never used: {cause}, so epsilon is 1 for the first "
                f"{steps:,} environment steps ({epochs} epoch{'s' if epochs > 1 else ''}, until the buffer holds "
                f"algo.min_buffer_size transitions) and algo.exploration_final_eps={final:g} after them; to use it, "
                f"set algo.exploration_steps above {steps:,} (the first learned epoch then acts at the schedule's "
                f"value at step {steps:,})")

    def target_update_warning(self, epoch_steps: int) -> str | None:
        """The warning line when a given ``target_update_interval`` is not what epochs of ``epoch_steps``
        steps run: the online network changes only in an epoch's gradient steps and the target is updated
        before them, for each multiple of the interval the epoch passed (one hard copy at most, soft
        updates back to back); None for a multiple of the epoch's steps, and for the default (null)."""
        asked, tau = self.config.target_update_interval, self.config.tau
        if asked is None or asked % epoch_steps == 0:
            return None
        head = (f"algo.target_update_interval={asked} counts in whole epochs (the online network changes only in an "
                f"epoch's gradient steps and the target is updated before them; this run's first epoch collected "
                f"{epoch_steps:,} steps), so ")
        divisor = largest_divisor(asked, epoch_steps)
        exact = (f"for every {asked:,}, make trainer.batch_size a divisor of it (trainer.batch_size={divisor}), or "
                 if divisor > 1 else "")
        if asked > epoch_steps:
            low, high = asked // epoch_steps, asked // epoch_steps + 1
            verb = "copied" if tau == 1 else f"updated (algo.tau={tau:g})"
            return (f"{head}the target network is {verb} before the gradient steps of each epoch that passes a "
                    f"multiple of {asked:,} steps: every {low} or {high} epochs ({low * epoch_steps:,} or "
                    f"{high * epoch_steps:,} environment steps), not every {asked:,}; {exact}set "
                    f"algo.target_update_interval to a multiple of the epoch's steps ({low * epoch_steps} or "
                    f"{high * epoch_steps} are the nearest)")
        if not exact:
            exact = "target updates come at most once an epoch, so lower trainer.batch_size for more, or "
        if tau == 1:
            return (f"{head}the target network is copied once an epoch, every {epoch_steps:,} environment steps, not "
                    f"every {asked:,}; {exact}set algo.target_update_interval={epoch_steps} to ask for what runs")
        low, high = epoch_steps // asked, -(-epoch_steps // asked)
        taus = [f"{1 - (1 - tau) ** n:.6g}" for n in sorted({low, high})]
        runs = (f"set algo.target_update_interval={epoch_steps} algo.tau={taus[0]} to ask for what runs" if low == high
                else f"set algo.target_update_interval={epoch_steps} and the algo.tau you want each epoch")
        return (f"{head}the {' or '.join(map(str, sorted({low, high})))} soft updates (algo.tau={tau:g}) each epoch "
                f"passes are applied back to back before its gradient steps: one update of tau={' or '.join(taus)} "
                f"every {epoch_steps:,} environment steps, not one of tau={tau:g} every {asked:,}; {exact}{runs}")

    # ------------------------------------------------------------------ one update
    def gradient_step(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One Huber-loss step towards the (double) DQN target."""
        c = self.config
        policy: Any = self.policy
        actions = batch["actions"].reshape(-1, 1).long()
        with torch.no_grad():
            next_target = self.target.q_values(batch["next_observations"])
            if c.double:
                best = policy.q_values(batch["next_observations"]).argmax(dim=1, keepdim=True)
                next_q = next_target.gather(1, best).squeeze(1)
            else:
                next_q = next_target.max(dim=1).values
            target = batch["rewards"] + c.discount * (1.0 - batch["terminals"]) * next_q
        q = policy.q_values(batch["observations"]).gather(1, actions).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        optimizer = self.optimizers["q"]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
        optimizer.step()
        return {"loss/q": loss.item(), "dqn/q_mean": q.detach().mean().item()}


def build_dqn(config: DQNConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> DQN:
    """Build DQN from its config."""
    return DQN(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


build_dqn.component_class = DQN  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=dqn``."""
    register("algo", "dqn", build_dqn, config=DQNConfig,
             help="double DQN with target network and epsilon schedule, Discrete actions (policy=qnet)")


__all__ = ["DEFAULT_TARGET_UPDATE_INTERVAL", "DQN", "DQNConfig", "build_dqn"]
