"""Run Stable-Baselines3's version of a corral run, for ``experiments/learning.py --peer sb3``.

    python experiments/peers/sb3_runner.py --config corral_config.yaml --seed 1 --out runs/x/sb3_seed1

``--config`` is a composed corral config (what ``python train.py <overrides>`` runs, as YAML).
:func:`sb3_spec` maps it to the same algorithm in SB3 (``ppo`` -> ``stable_baselines3.PPO``,
``trpo`` -> ``sb3_contrib.TRPO``, ``sac`` -> ``SAC``, ``dqn`` -> ``DQN``) with the matching
hyperparameters, the same environment id, the same number of environments, the same step budget
and the same evaluation protocol: every ``trainer.eval_every`` rows of ``trainer.batch_size``
environment steps, ``trainer.eval_episodes`` deterministic episodes from the same reset seeds
corral's evaluation uses. When corral's run normalises (``normalize.obs`` / ``normalize.reward``), SB3's
environments are wrapped in ``VecNormalize`` with the same clips, discount and epsilon, and its
evaluation normalises observations with that wrapper's current statistics (frozen, as corral's).
It writes ``progress.csv`` with corral's column names
(``env_steps``, ``train/return_mean``, ``eval/return_mean``, ``time/total_s``).

This is benchmark code: it needs the ``bench`` extra (``pip install 'corral[bench]'``); the corral
package itself never imports Stable-Baselines3.
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

#: corral algorithm name -> (module, class) of the SB3 implementation of the same algorithm.
SB3_ALGOS: dict[str, tuple[str, str]] = {
    "ppo": ("stable_baselines3", "PPO"),
    "trpo": ("sb3_contrib", "TRPO"),
    "sac": ("stable_baselines3", "SAC"),
    "dqn": ("stable_baselines3", "DQN"),
}

ON_POLICY = ("ppo", "trpo")


@dataclass
class SB3Spec:
    """Everything needed to run the SB3 peer of one corral configuration."""

    algo: str  # corral's name: ppo, trpo, sac, dqn
    kwargs: dict[str, Any]  # keyword arguments of the SB3 algorithm class (policy_kwargs included)
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_length: int | None = None
    n_envs: int = 1
    total_steps: int = 100_000
    row_every: int = 2048  # environment steps per progress row (corral's trainer.batch_size)
    eval_every: int = 5  # rows between evaluations (corral's trainer.eval_every; 0: never)
    eval_episodes: int = 10
    torch_threads: int = 1
    #: ``VecNormalize`` keyword arguments when corral's ``normalize.obs`` / ``normalize.reward`` is on
    #: (None: no normalisation).
    normalize: dict[str, Any] | None = None
    unmapped: list[str] = field(default_factory=list)  # corral settings SB3 has no counterpart for

    @property
    def sb3_class(self) -> tuple[str, str]:
        """(module, class name) of the SB3 algorithm."""
        return SB3_ALGOS[self.algo]


def _n_envs(cfg: Mapping[str, Any]) -> int:
    worker = cfg.get("worker", {}) or {}
    sampler = cfg.get("sampler", {}) or {}
    per_worker = int(worker.get("n_envs", 1) or 1) if worker.get("name") != "default" else 1
    return per_worker * int(sampler.get("n_workers", 1) or 1)


def _activation(name: str) -> Any:
    from torch import nn

    return {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}[name]


def _budget(trainer: Mapping[str, Any]) -> int:
    """Environment steps corral trains for: ``max_env_steps``, or ``n_epochs * batch_size`` if smaller
    (either may be null, not both)."""
    limits = [int(trainer["n_epochs"]) * int(trainer["batch_size"])] if trainer.get("n_epochs") is not None else []
    if trainer.get("max_env_steps") is not None:
        limits.append(int(trainer["max_env_steps"]))
    return min(limits)


def _normalize_kwargs(cfg: Mapping[str, Any], unmapped: list[str]) -> dict[str, Any] | None:
    """``VecNormalize`` arguments for corral's ``normalize`` node (None when it normalises nothing):
    ``norm_obs`` = ``obs``, ``norm_reward`` = ``reward``, ``clip_obs`` = ``clip``, ``clip_reward`` =
    ``clip_reward``, ``gamma`` = ``gamma`` (null: the algorithm's discount, as rl-zoo passes it),
    ``epsilon`` = ``epsilon``."""
    node = cfg.get("normalize") or {}
    if not (node.get("obs") or node.get("reward")):
        return None
    gamma = node.get("gamma")
    if gamma is None:
        gamma = cfg["algo"].get("discount", 0.99)
    if not node.get("update", True):
        unmapped.append("normalize.update=false (VecNormalize always updates while training)")
    return {"norm_obs": bool(node.get("obs")), "norm_reward": bool(node.get("reward")),
            "clip_obs": float(node.get("clip", 10.0)), "clip_reward": float(node.get("clip_reward", 10.0)),
            "gamma": float(gamma), "epsilon": float(node.get("epsilon", 1e-8))}


def sb3_spec(cfg: Mapping[str, Any]) -> SB3Spec:
    """Map a composed corral config (a plain dict) to the SB3 run with the same settings."""
    algo = cfg["algo"]
    name = algo["name"]
    if name not in SB3_ALGOS:
        raise ValueError(f"no SB3 peer for algo={name}; SB3 peers exist for {', '.join(SB3_ALGOS)}")
    trainer, policy, env = cfg["trainer"], cfg.get("policy", {}) or {}, cfg["env"]
    n_envs = _n_envs(cfg)
    batch = int(trainer["batch_size"])
    unmapped: list[str] = []
    kwargs: dict[str, Any]
    if name in ON_POLICY:
        hidden = list(policy.get("hidden_sizes", [64, 64]))
        act = _activation(policy.get("activation", "tanh"))
        if batch % n_envs:
            unmapped.append(f"trainer.batch_size={batch} is not a multiple of {n_envs} envs; "
                            f"SB3 collects {batch // n_envs * n_envs} steps per rollout")
        policy_kwargs = {"net_arch": {"pi": hidden, "vf": list(algo.get("vf_hidden_sizes", [64, 64]))},
                         "activation_fn": act, "log_std_init": float(policy.get("init_log_std", 0.0))}
        kwargs = {"n_steps": max(batch // n_envs, 1), "gamma": algo["discount"], "gae_lambda": algo["gae_lambda"],
                  "normalize_advantage": bool(algo.get("normalize_advantages", True)), "policy_kwargs": policy_kwargs}
        if name == "ppo":
            kwargs.update(learning_rate=algo["learning_rate"], n_epochs=algo["n_epochs"],
                          batch_size=algo["minibatch_size"], clip_range=algo["clip_range"],
                          # SB3's value loss is vf_coef * mse; corral's (as CleanRL's) vf_coef * 0.5 * mse.
                          vf_coef=algo["vf_coef"] / 2, ent_coef=algo["ent_coef"], max_grad_norm=algo["max_grad_norm"],
                          target_kl=algo.get("target_kl"))
        else:
            kwargs.update(learning_rate=algo["vf_lr"], batch_size=algo["vf_minibatch_size"],
                          n_critic_updates=algo["vf_epochs"], target_kl=algo["max_kl"], cg_max_steps=algo["cg_iters"],
                          cg_damping=algo["cg_damping"], line_search_shrinking_factor=algo["backtrack_ratio"],
                          line_search_max_iter=algo["max_backtracks"])
    else:
        kwargs = _off_policy_kwargs(name, algo, policy, batch, n_envs, _budget(trainer), unmapped)
    return SB3Spec(
        algo=name,
        kwargs=kwargs,
        env_id=str(env["id"]),
        env_kwargs=dict(env.get("kwargs") or {}),
        max_episode_length=env.get("max_episode_length"),
        n_envs=n_envs,
        total_steps=_budget(trainer),
        row_every=batch,
        eval_every=int(trainer.get("eval_every", 0) or 0),
        eval_episodes=int(trainer.get("eval_episodes", 10)),
        torch_threads=int(trainer.get("torch_threads", 1) or 0),
        normalize=_normalize_kwargs(cfg, unmapped),
        unmapped=unmapped,
    )


def _learning_starts(min_buffer_size: int | None, row_every: int) -> int:
    """SB3's ``learning_starts`` for corral's ``algo.min_buffer_size`` with epochs of ``row_every`` steps:
    corral acts at random for whole epochs until the buffer holds ``min_buffer_size`` transitions (null:
    100) and trains at the end of the epoch that fills it, after ``W`` steps (``warmup_steps``). SB3 trains
    at the end of a rollout only once ``num_timesteps > learning_starts``, so ``W`` itself would start its
    training one rollout (one epoch) later; ``W - 1`` trains after the same ``W`` steps (and acts at random
    for ``W - 1`` of them, the last from the untrained policy)."""
    from corral.rl.off_policy import warmup_steps

    return max(warmup_steps(min_buffer_size, row_every) - 1, 0)


def _off_policy_kwargs(name: str, algo: Mapping[str, Any], policy: Mapping[str, Any], row_every: int,
                       n_envs: int, total_steps: int, unmapped: list[str]) -> dict[str, Any]:
    """SB3 keyword arguments for ``sac`` / ``dqn`` (field mapping documented in their config classes).

    corral runs an epoch's gradient steps (``utd_ratio * trainer.batch_size``, or ``gradient_steps``)
    after collecting the epoch, so SB3 gets ``train_freq`` = one epoch and that many
    ``gradient_steps``: the same schedule, not SB3's own default of one step after every step.
    """
    steps_per_env = max(row_every // n_envs, 1)
    gradient_steps = algo.get("gradient_steps")
    if gradient_steps is None:
        gradient_steps = max(int(round(float(algo["utd_ratio"]) * row_every)), 1)
    kwargs: dict[str, Any] = {
        "gamma": algo["discount"], "learning_rate": algo["learning_rate"], "buffer_size": algo["buffer_size"],
        "learning_starts": _learning_starts(algo.get("min_buffer_size"), row_every),
        "batch_size": algo["batch_size"], "tau": algo["tau"],
        "train_freq": (steps_per_env, "step"), "gradient_steps": int(gradient_steps),
        # null: SB3's own default, 10,000 (corral counts it in whole epochs, as any value; with train_freq of
        # one epoch SB3 does too: its copies during a rollout all take the network of the last train())
        "target_update_interval": 10_000 if algo.get("target_update_interval") is None else algo["target_update_interval"],
    }
    act = _activation(policy.get("activation", "relu"))
    hidden = list(policy.get("hidden_sizes", [256, 256]))
    if name == "sac":
        alpha = float(algo.get("initial_alpha", 1.0))
        kwargs["ent_coef"] = f"auto_{alpha:g}" if algo.get("auto_entropy", True) else alpha
        kwargs["target_entropy"] = "auto" if algo.get("target_entropy") is None else algo["target_entropy"]
        kwargs["policy_kwargs"] = {"net_arch": {"pi": hidden, "qf": list(algo.get("qf_hidden_sizes", [256, 256]))},
                                   "activation_fn": act}
        if algo.get("qf_activation", "relu") != policy.get("activation", "relu"):
            unmapped.append(f"algo.qf_activation={algo['qf_activation']} (SB3 uses one activation_fn for both)")
        for key in ("log_std_min", "log_std_max"):
            if key in policy and policy[key] != {"log_std_min": -20.0, "log_std_max": 2.0}[key]:
                unmapped.append(f"policy.{key}={policy[key]} (SB3 clips log std to [-20, 2])")
    else:
        kwargs.update(exploration_initial_eps=algo["exploration_initial_eps"],
                      exploration_final_eps=algo["exploration_final_eps"],
                      exploration_fraction=min(float(algo["exploration_steps"]) / total_steps, 1.0),
                      max_grad_norm=algo["max_grad_norm"])
        kwargs["policy_kwargs"] = {"net_arch": hidden, "activation_fn": act}
        if algo.get("double", False):
            unmapped.append("algo.double=true (SB3's DQN has no double-DQN option: it runs plain DQN targets)")
        if policy.get("dueling", False):
            unmapped.append("policy.dueling=true (SB3's DQN has no dueling head)")
    return kwargs


# ------------------------------------------------------------------------------------------- running
def make_env(spec: SB3Spec) -> Any:
    """One environment as corral makes it: ``gymnasium.make(id, **kwargs)``, cut at ``max_episode_length``."""
    import gymnasium as gym

    kwargs = dict(spec.env_kwargs)
    if spec.max_episode_length:
        kwargs["max_episode_steps"] = int(spec.max_episode_length)
    return gym.make(spec.env_id, **kwargs)


def evaluate(model: Any, spec: SB3Spec, seed: int) -> float:
    """Mean return of ``eval_episodes`` deterministic episodes, reset with corral's evaluation seeds
    (observations normalised with the training ``VecNormalize``'s current, frozen statistics)."""
    import numpy as np

    from corral.framework.env import child_seed, seed_int
    from corral.framework.evaluation import EVAL_BRANCH

    root = child_seed(np.random.SeedSequence(seed), EVAL_BRANCH)
    norm = model.get_vec_normalize_env()
    env = make_env(spec)
    returns = []
    try:
        for i in range(spec.eval_episodes):
            obs, _ = env.reset(seed=seed_int(child_seed(root, i, 0)))
            total = 0.0
            while True:
                if norm is not None:
                    obs = norm.normalize_obs(obs)
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                if terminated or truncated:
                    break
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


def run(spec: SB3Spec, seed: int, out_dir: Path) -> Path:
    """Train SB3's algorithm per ``spec``; write and return ``out_dir/progress.csv``."""
    import importlib

    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    if spec.torch_threads > 0:
        torch.set_num_threads(spec.torch_threads)  # as corral's trainer.torch_threads
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "progress.csv"
    columns = ["epoch", "env_steps", "train/return_mean", "train/n_episodes", "eval/return_mean", "time/total_s"]

    class Progress(BaseCallback):
        """A progress row every ``row_every`` steps; evaluation every ``eval_every`` rows."""

        def __init__(self) -> None:
            super().__init__()
            self.rows: list[dict[str, Any]] = []
            self.returns: list[float] = []
            self.next_row = spec.row_every
            self.t0 = 0.0

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            return True

        def _on_rollout_start(self) -> None:
            # Called after the previous update, so a row (and its evaluation) sees the updated
            # policy, as corral's rows do (sample, train_once, then log and evaluate).
            self.maybe_write_row()

        def maybe_write_row(self) -> None:
            """Write a row if ``row_every`` more steps were taken since the last one."""
            if self.num_timesteps >= self.next_row:
                while self.next_row <= self.num_timesteps:
                    self.next_row += spec.row_every
                self.write_row()

        def write_row(self) -> None:
            """Append a row (training returns since the last row, evaluation when due) to progress.csv."""
            epoch = len(self.rows)
            row: dict[str, Any] = {"epoch": epoch, "env_steps": self.num_timesteps,
                                   "train/n_episodes": len(self.returns)}
            if self.returns:
                row["train/return_mean"] = float(np.mean(self.returns))
            self.returns = []
            if spec.eval_every and (epoch + 1) % spec.eval_every == 0:
                row["eval/return_mean"] = evaluate(self.model, spec, seed)
            row["time/total_s"] = time.perf_counter() - self.t0
            self.rows.append(row)
            with open(path, "a" if epoch else "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                if not epoch:
                    writer.writeheader()
                writer.writerow(row)

    module, cls = spec.sb3_class
    algo_class = getattr(importlib.import_module(module), cls)
    env = make_vec_env(lambda: make_env(spec), n_envs=spec.n_envs, seed=seed)
    if spec.normalize is not None:
        from stable_baselines3.common.vec_env import VecNormalize

        # Outside make_vec_env's Monitor: the logged training returns stay the environment's.
        env = VecNormalize(env, **spec.normalize)
    model = algo_class("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **spec.kwargs)
    # A logger with no outputs: SB3's default makes a /tmp/SB3-<time> directory on every learn(),
    # which nothing here reads and nothing removes (progress.csv above is the run's record).
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    callback = Progress()
    model.learn(total_timesteps=spec.total_steps, callback=callback)
    callback.maybe_write_row()
    env.close()
    return path


def load_config(path: Path) -> dict[str, Any]:
    """A composed corral config from YAML, resolved to plain containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run one seed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, required=True, help="composed corral config (YAML)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="directory for progress.csv")
    parser.add_argument("--dry-run", action="store_true", help="print the mapping and stop (train nothing)")
    args = parser.parse_args(argv)
    spec = sb3_spec(load_config(args.config))
    for line in spec.unmapped:
        print(f"sb3_runner: not mapped: {line}", flush=True)
    shown = repr(spec.kwargs).replace("<class 'torch.nn.modules.activation.", "nn.").replace("'>", "")
    wrapped = f" in VecNormalize({spec.normalize})" if spec.normalize is not None else ""
    print(f"sb3_runner: {spec.sb3_class[0]}.{spec.sb3_class[1]}({shown}) on {spec.env_id} x{spec.n_envs}{wrapped}, "
          f"{spec.total_steps} steps", flush=True)
    if not args.dry_run:
        run(spec, args.seed, args.out)


if __name__ == "__main__":
    main()
