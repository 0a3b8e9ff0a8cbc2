"""Meta-test trained RL2 and PEARL runs on held-out tasks and record adaptation results.

    python experiments/meta_eval.py --name rl2_bandits --runs experiments/runs/rl2_bandits/seed1 --trials-per-task 20
    python experiments/meta_eval.py --name rl2_pointnav --runs experiments/runs/rl2_pointnav/seed1 --trials-per-task 10
    python experiments/meta_eval.py --name pearl_pointnav --runs experiments/runs/pearl_pointnav/seed1 --trials-per-task 10

Each run directory is one finished ``python train.py experiment=rl2_... hydra.run.dir=<dir>`` (add
``--train "experiment=rl2_bandits"`` to train the ones that have no snapshot yet). The script
rebuilds the run from its recorded config, loads its last snapshot and runs trials of the
trained policy on every held-out meta-test task of the run's task split (the policy samples, as
in training; the seeds are the evaluation's own). For bandits it runs, on the same tasks and the
same number of trials, a uniformly random policy and UCB1 (Auer et al. 2002) and reports the
oracle (always the best arm, in expectation). For PEARL (``algo=pearl``) a trial is the run's
``algo.meta_eval_episodes`` episodes, the first on the prior and each later one on the posterior
over the trial so far, evaluated as the run's meta-evaluation does (``algo.meta_eval_*``); the
sparse return the encoder sees and the success rate (any step within the goal radius) are
reported per episode as well when the encoder sees the sparse reward (``worker.context_reward``).
Results go to ``experiments/results/<name>.md``
with the exact commands, and adaptation plots to ``experiments/results/<name>*.png``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- runs
def train(run_dir: Path, overrides: list[str], seed: int) -> tuple[str, float]:
    """``python train.py <overrides> seed=<seed> hydra.run.dir=<run_dir>``; returns (command, wall s)."""
    cmd = [sys.executable, str(ROOT / "train.py"), *overrides, f"seed={seed}", f"hydra.run.dir={run_dir}",
           "trainer.progress=false"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"training {run_dir} failed:\n{proc.stderr[-3000:]}")
    return "python train.py " + " ".join(shlex.quote(a) for a in cmd[2:]), time.perf_counter() - t0


def load_run(run_dir: Path) -> Any:
    """The run rebuilt from its recorded config, with its last snapshot loaded (no loggers)."""
    from omegaconf import OmegaConf

    from corral.framework.compose import build
    from corral.framework.config import register_configs
    from corral.framework.entry import snapshot_config

    register_configs()
    # A resumed run's .hydra/config.yaml holds only what the resuming command composed.
    cfg = snapshot_config(run_dir) or OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    cfg.logger = {}
    run = build(cfg)
    run.trainer.restore(run_dir)
    return run


def read_progress(run_dir: Path) -> list[dict[str, float]]:
    """progress.csv rows as floats."""
    with open(run_dir / "progress.csv") as f:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]


# ---------------------------------------------------------------------- bandit baselines
#: Exploration coefficients searched for the tuned UCB1 (c = sqrt(2) is Auer et al.'s UCB1).
UCB_COEFFICIENTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, math.sqrt(2))


def bandit_baseline(kind: str, probs: np.ndarray, n_pulls: int, rng: np.random.Generator,
                    c: float = math.sqrt(2)) -> np.ndarray:
    """Rewards of one trial of ``n_pulls`` on the bandit ``probs`` with ``random`` or ``ucb1``
    (exploration coefficient ``c``: index = mean + c * sqrt(ln t / n))."""
    k = len(probs)
    counts, sums = np.zeros(k), np.zeros(k)
    rewards = np.zeros(n_pulls)
    for t in range(n_pulls):
        if kind == "random":
            arm = int(rng.integers(k))
        elif t < k:  # UCB1 pulls every arm once, then maximises mean + sqrt(2 ln t / n)
            arm = t
        else:
            arm = int(np.argmax(sums / counts + c * np.sqrt(math.log(t) / counts)))
        rewards[t] = float(rng.random() < probs[arm])
        counts[arm] += 1
        sums[arm] += rewards[t]
    return rewards


# ---------------------------------------------------------------------- evaluation
def evaluate_run(run_dir: Path, trials_per_task: int, seed: int, episodes_per_trial: int | None = None
                 ) -> dict[str, Any]:
    """Per-trial, per-episode returns of the trained policy on the run's meta-test tasks.

    ``episodes_per_trial`` (PEARL only) lengthens or shortens the trial: one prior episode, then
    one per posterior update; by default the run's ``algo.meta_eval_episodes``."""
    from corral.meta.meta_eval import pearl_episode_returns, trial_episode_returns

    if episodes_per_trial is not None and episodes_per_trial < 1:
        raise SystemExit(f"--episodes-per-trial must be at least 1, got {episodes_per_trial}")
    run = load_run(run_dir)
    try:
        kwargs: dict[str, Any] = {}
        if episodes_per_trial is not None:
            if run.cfg.algo.name != "pearl":
                raise SystemExit("--episodes-per-trial applies to PEARL runs only (an RL2 trial's length is "
                                 "the trained worker.n_episodes_per_trial)")
            kwargs["n_episodes"] = episodes_per_trial
        trials = run.algo.meta_test(run.env, seed=seed, trials_per_task=trials_per_task, **kwargs)
        probe = run.env()
        tasks = run.algo.split.tasks(probe, "test")
        train_tasks = run.algo.split.tasks(probe, "train")
        probe.close()
        extra: dict[str, Any] = {}
        if "pearl_episode" in trials.episode_infos:  # PEARL: one batch episode per episode of a trial
            returns = pearl_episode_returns(trials)
            task_ids = trials.episode_infos["task_id"][:: returns.shape[1]]
            context_reward = trials.env_infos["context_reward"]
            if not np.array_equal(context_reward, trials.rewards):  # the encoder sees the sparse reward
                extra["context_returns"] = pearl_episode_returns(trials, context_reward)
                extra["successes"] = pearl_episode_returns(trials, (context_reward > 0).astype(np.float64)) > 0
            if run.cfg.env.name == "point_nav":  # where each episode ends (the robot starts at the origin)
                goals = {t.id: np.asarray(t.params["goal"], dtype=np.float64) for t in tasks}
                ends = trials.last_observations.astype(np.float64)
                episode_goals = np.stack([goals[int(i)] for i in trials.episode_infos["task_id"]])
                extra["end_goal_distance"] = np.linalg.norm(ends - episode_goals, axis=1).reshape(returns.shape)
                extra["end_start_distance"] = np.linalg.norm(ends, axis=1).reshape(returns.shape)
        else:
            returns, task_ids = trial_episode_returns(trials), trials.episode_infos["task_id"]
        return {
            **extra,
            "returns": returns,  # [n_trials, n_episodes_per_trial]
            "task_ids": task_ids,
            "tasks": {t.id: t.params for t in tasks},
            "train_tasks": [t.params for t in train_tasks],
            "cfg": run.cfg,
            "steps": run.trainer.total_env_steps,
            "progress": read_progress(run_dir),
        }
    finally:
        run.close()


def mean_se(x: np.ndarray) -> str:
    """``mean ± standard error``."""
    x = np.asarray(x, dtype=np.float64)
    return f"{x.mean():.3f} ± {x.std(ddof=1) / math.sqrt(len(x)):.3f}"


def plot_lines(path: Path, curves: dict[str, np.ndarray], xlabel: str, ylabel: str, title: str) -> bool:
    """One line per curve (mean with a standard-error band); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, values in curves.items():
        values = np.asarray(values, dtype=np.float64)
        mean = values.mean(axis=0)
        se = values.std(axis=0, ddof=1) / math.sqrt(len(values))
        xs = np.arange(1, len(mean) + 1)
        ax.plot(xs, mean, marker="o", label=label)
        ax.fill_between(xs, mean - se, mean + se, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_learning(path: Path, runs: list[dict[str, Any]], keys: list[str], title: str) -> bool:
    """Meta-evaluation columns of progress.csv against environment steps."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in runs:
        for key in keys:
            rows = [row for row in r["progress"] if key in row]
            ax.plot([row["env_steps"] for row in rows], [row[key] for row in rows], label=f"{r['label']} {key}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return on held-out tasks")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def bandit_section(name: str, runs: list[dict[str, Any]], seed: int, out: Path) -> list[str]:
    """Table and plot: RL2 vs random vs UCB1 vs oracle on the same held-out bandits."""
    lines = ["| run | env steps | policy | reward per trial (mean ± s.e.) | % of UCB1 (c = sqrt 2) |", "|---|---|---|---|---|"]
    curves: dict[str, np.ndarray] = {}
    verdicts = []
    for r in runs:
        pulls_per_episode = int(r["cfg"].env.n_pulls or r["cfg"].env.max_episode_length or 1)
        per_trial = r["returns"].shape[1] * pulls_per_episode
        rng = np.random.default_rng(seed)
        probs = [np.asarray(r["tasks"][int(i)]["probs"]) for i in r["task_ids"]]
        random_ = np.array([bandit_baseline("random", p, per_trial, rng) for p in probs])
        ucb = np.array([bandit_baseline("ucb1", p, per_trial, rng) for p in probs])
        oracle = np.array([per_trial * p.max() for p in probs])
        # UCB1 with its coefficient tuned on the meta-train tasks (as the RL2 paper tuned its baselines)
        train_probs = [np.asarray(t["probs"]) for t in r["train_tasks"]]
        tune_rng = np.random.default_rng(seed + 1)
        scores = {c: np.mean([bandit_baseline("ucb1", p, per_trial, tune_rng, c).sum() for p in train_probs for _ in range(4)])
                  for c in UCB_COEFFICIENTS}
        best_c = max(scores, key=scores.get)
        tuned = np.array([bandit_baseline("ucb1", p, per_trial, rng, best_c) for p in probs])
        rl2 = r["returns"].sum(axis=1)
        ucb_mean = ucb.sum(axis=1).mean()
        for label, values in (("RL2 (trained)", rl2), ("random", random_.sum(axis=1)), ("UCB1 (c = sqrt 2)", ucb.sum(axis=1)),
                              (f"UCB1 (c = {best_c:.2f}, tuned on meta-train tasks)", tuned.sum(axis=1)),
                              ("oracle (best arm, expected)", oracle)):
            lines.append(f"| {r['label']} | {r['steps']:,} | {label} | {mean_se(values)} | "
                         f"{100 * values.mean() / ucb_mean:.1f}% |")
        verdicts.append(
            f"{r['label']}: RL2 {rl2.mean():.3f} vs random {random_.sum(axis=1).mean():.3f} vs UCB1 {ucb_mean:.3f} "
            f"({100 * rl2.mean() / ucb_mean:.1f}% of UCB1) vs tuned UCB1 {tuned.sum(axis=1).mean():.3f} "
            f"({100 * rl2.mean() / tuned.sum(axis=1).mean():.1f}% of it) on {len(rl2)} trials of "
            f"{len(set(r['task_ids'].tolist()))} held-out bandits"
        )
        if pulls_per_episode == 1:
            curves[f"RL2 ({r['label']})"] = r["returns"]
        if "UCB1" not in curves:
            curves["UCB1"] = ucb
            curves[f"UCB1 (c = {best_c:.2f})"] = tuned
            curves["random"] = random_
    plot = out / f"{name}_adaptation.png"
    if plot_lines(plot, curves, "pull within the trial", "mean reward", f"{name}: reward per pull on held-out bandits"):
        lines += ["", f"![reward per pull]({plot.name})"]
    return ["## Reward per trial on held-out bandits", "", *lines, "", *[f"- {v}" for v in verdicts]]


def point_nav_oracle(r: dict[str, Any]) -> np.ndarray:
    """Return of an episode that knows the goal and moves straight at it (per held-out trial)."""
    from corral.plugins.envs.point_nav import PointNavEnv

    env_cfg = r["cfg"].env
    env = PointNavEnv(sparse=env_cfg.sparse, goal_radius=env_cfg.goal_radius, goal_distance=env_cfg.goal_distance)
    length = int(env_cfg.max_episode_length or 20)
    out = []
    for task_id in r["task_ids"]:
        env.set_task(r["tasks"][int(task_id)])
        pos, _ = env.reset(seed=0)
        total = 0.0
        for _ in range(length):
            pos, reward, *_ = env.step(np.asarray(env.goal) - pos)  # clipped to the action bounds
            total += reward
        out.append(total)
    return np.asarray(out)


def adaptation_section(name: str, runs: list[dict[str, Any]], out: Path, plot: bool = True) -> list[str]:
    """Table and plot: return of each episode index within a trial on held-out tasks."""
    n_eps = runs[0]["returns"].shape[1]
    lines = ["| run | env steps | trials | " + " | ".join(f"episode {i + 1}" for i in range(n_eps))
             + " | episode 2 - episode 1 (paired) |", "|" + "---|" * (n_eps + 4)]
    verdicts = []
    for r in runs:
        ret = r["returns"]
        diff = ret[:, 1] - ret[:, 0] if n_eps > 1 else np.zeros(len(ret))
        lines.append(f"| {r['label']} | {r['steps']:,} | {len(ret)} | "
                     + " | ".join(mean_se(ret[:, i]) for i in range(n_eps)) + f" | {mean_se(diff)} |")
        if r["cfg"].env.name == "point_nav":
            verdicts.append(f"{r['label']}: for scale, an episode that knows the goal and moves straight at it returns "
                            f"{mean_se(point_nav_oracle(r))} on the same tasks")
        verdicts.append(f"{r['label']}: episode 2 {'>' if diff.mean() > 0 else '<='} episode 1 by {diff.mean():.3f} "
                        f"(s.e. {diff.std(ddof=1) / math.sqrt(len(diff)):.3f}); episode 2 better in "
                        f"{100 * (diff > 0).mean():.0f}% of trials")
    path = out / f"{name}_adaptation.png"
    if plot and plot_lines(path, {r["label"]: r["returns"] for r in runs}, "episode within the trial", "return",
                           f"{name}: return per episode on held-out tasks"):
        lines += ["", f"![adaptation]({path.name})"]
    return ["## Return per episode of a trial on held-out tasks", "", *lines, "", *[f"- {v}" for v in verdicts]]


def context_section(name: str, runs: list[dict[str, Any]], out: Path) -> list[str]:
    """PEARL: the reward the encoder sees (sparse) and the success rate, per episode of a trial."""
    n_eps = runs[0]["context_returns"].shape[1]
    head = " | ".join(f"episode {i + 1}" + (" (prior)" if i == 0 else " (posterior)") for i in range(n_eps))
    lines = [f"| run | measure | {head} |", "|" + "---|" * (n_eps + 2)]
    for r in runs:
        lines.append(f"| {r['label']} | sparse return | "
                     + " | ".join(mean_se(r["context_returns"][:, i]) for i in range(n_eps)) + " |")
        lines.append(f"| {r['label']} | success rate | "
                     + " | ".join(f"{100 * r['successes'][:, i].mean():.0f}%" for i in range(n_eps)) + " |")
        for key, measure in (("end_goal_distance", "distance to the goal at the episode's end"),
                             ("end_start_distance", "distance from the start at the episode's end")):
            if key in r:
                lines.append(f"| {r['label']} | {measure} | " + " | ".join(mean_se(r[key][:, i]) for i in range(n_eps))
                             + " |")
        for measure, values, scale in (("success rate, points", r["successes"].astype(np.float64), 100.0),
                                       ("sparse return", r["context_returns"], 1.0)):
            gains = " | ".join("" if i == 0 else mean_se(scale * (values[:, i] - values[:, 0])) for i in range(n_eps))
            lines.append(f"| {r['label']} | {measure}: gain over episode 1 (paired) | {gains} |")
    path = out / f"{name}_success.png"
    if plot_lines(path, {r["label"]: r["successes"].astype(np.float64) for r in runs}, "episode within the trial",
                  "success rate", f"{name}: success per episode on held-out tasks"):
        lines += ["", f"![success]({path.name})"]
    return ["## What the encoder sees: sparse return and success per episode (held-out tasks)", "", *lines]


def run_labels(runs: list[dict[str, Any]], labels: list[str] | None = None) -> list[str]:
    """The given labels, else each run's seed, with its steps added when seeds repeat (a resumed run)."""
    if labels:
        return list(labels)
    out = [f"seed {r['cfg'].seed}" for r in runs]
    if len(set(out)) < len(out):
        out = [f"{label}, {r['steps']:,} steps" for label, r in zip(out, runs)]
    return out


def main() -> None:
    """Parse arguments, (train,) evaluate every run, write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="results name (file stem), e.g. rl2_bandits")
    parser.add_argument("--runs", nargs="+", type=Path, required=True, help="run directories of train.py")
    parser.add_argument("--train", default="", help="train.py overrides for runs that have no snapshot yet")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="training seed of each run (with --train)")
    parser.add_argument("--trials-per-task", type=int, default=10, help="trials per held-out task")
    parser.add_argument("--eval-seed", type=int, default=12345, help="seed of the evaluation trials and baselines")
    parser.add_argument("--episodes-per-trial", type=int, default=None,
                        help="PEARL: episodes per meta-test trial, the first on the prior and each later one on "
                             "the posterior over the trial so far (default: the run's algo.meta_eval_episodes)")
    parser.add_argument("--note", default="", help="a line to record with the results (e.g. machine load)")
    parser.add_argument("--labels", nargs="*", default=None,
                        help="one name per run for the tables and plots (default: its seed, and its steps when "
                             "seeds repeat)")
    args = parser.parse_args()
    if args.labels is not None and len(args.labels) != len(args.runs):
        raise SystemExit(f"--labels needs one label per run: {len(args.runs)} runs, {len(args.labels)} labels")

    out = ROOT / "experiments" / "results"
    out.mkdir(parents=True, exist_ok=True)
    trained = []
    for i, run_dir in enumerate(args.runs):
        if not (run_dir / "snapshots").is_dir():
            if not args.train:
                raise SystemExit(f"{run_dir} has no snapshots; pass --train '<overrides>' to train it")
            seed = args.seeds[i] if args.seeds else i + 1
            trained.append(train(run_dir, shlex.split(args.train), seed))
    runs = []
    for run_dir in args.runs:
        r = evaluate_run(run_dir, args.trials_per_task, args.eval_seed, args.episodes_per_trial)
        r["run_dir"] = run_dir
        runs.append(r)
    for r, label in zip(runs, run_labels(runs, args.labels)):
        r["label"] = label

    import torch

    command = "python experiments/meta_eval.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        f"# {args.name}",
        "",
        f"Evaluation: `{command}`  ",
        *[f"Training: `{c}` ({w / 60:.1f} min wall)  " for c, w in trained],
        (f"Recorded {dt.datetime.now().isoformat(timespec='minutes')} on {platform.node()} "
         f"({platform.processor() or platform.machine()}, Python {platform.python_version()}, torch {torch.__version__})."),
        "",
        *([args.note, ""] if args.note else []),
        (f"Held-out meta-test tasks: {len(runs[0]['tasks'])} (disjoint from the meta-train tasks), "
         f"{args.trials_per_task} trials each, sampled with the trained policy."),
        "",
    ]
    if runs[0]["cfg"].env.name == "bandits":
        lines += bandit_section(args.name, runs, args.eval_seed, out)
    lines += [""] + adaptation_section(args.name, runs, out, plot=runs[0]["cfg"].env.name != "bandits")
    if "context_returns" in runs[0]:
        lines += [""] + context_section(args.name, runs, out)
    logged = sorted({k for row in runs[0]["progress"] for k in row if k.startswith("meta_eval/return_ep")})
    keys = logged[:2] or ["meta_eval/trial_return"]
    if runs[0]["cfg"].env.name == "bandits":
        keys = ["meta_eval/trial_return"]
    curve = out / f"{args.name}_learning.png"
    if plot_learning(curve, runs, keys, f"{args.name}: meta-evaluation during training"):
        lines += ["", "## Meta-evaluation during training (logged every evaluation epoch)", "",
                  f"![learning curve]({curve.name})"]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
