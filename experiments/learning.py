"""Run a corral configuration for several seeds and record what it learned.

    python experiments/learning.py --name ppo_cartpole --seeds 1 2 3 --threshold 475 -- worker=default

Each seed runs ``python train.py <overrides> seed=<s>`` in its own directory under
``experiments/runs/<name>/``; the results table (first environment step at which the metric
reached the threshold, final and best values, environment steps, wall time) goes to
``experiments/results/<name>.md`` together with the exact command, and a learning-curve PNG
to ``experiments/results/<name>.png`` when matplotlib is installed.

With ``--peer sb3`` (needs ``pip install 'corral[bench]'``) each corral seed is followed by
Stable-Baselines3's same algorithm on the same machine (``experiments/peers/sb3_runner.py``:
matching hyperparameters from the seed's resolved config, same environment id, step budget and
evaluation protocol); the table gets both frameworks' rows, a summary compares corral's final
return with the spread of SB3's seeds and the wall time per environment step, and the plot shows
each framework's mean with its min-max band over seeds:

    python experiments/learning.py --name trpo_cartpole --threshold 475 --peer sb3 -- experiment=trpo_cartpole
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_progress(path: Path) -> list[dict[str, float]]:
    """Rows of a run's progress.csv as floats (empty cells dropped)."""
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]


def first_reach(rows: list[dict[str, float]], metric: str, threshold: float) -> float | None:
    """Environment steps at the end of the first epoch whose ``metric`` >= ``threshold``."""
    for row in rows:
        if row.get(metric, float("-inf")) >= threshold:
            return row["env_steps"]
    return None


def run_seed(name: str, seed: int, overrides: list[str]) -> dict[str, object]:
    """Train one seed; return its row of the results table."""
    run_dir = ROOT / "experiments" / "runs" / name / f"seed{seed}"
    if run_dir.exists():  # an experiment run again under its name replaces its runs (train.py would refuse the directory)
        print(f"learning.py: replacing the earlier run {run_dir}", file=sys.stderr, flush=True)
        shutil.rmtree(run_dir)
    cmd = [sys.executable, str(ROOT / "train.py"), *overrides, f"seed={seed}", f"hydra.run.dir={run_dir}",
           "trainer.progress=false"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = read_progress(run_dir / "progress.csv")
    return {"seed": seed, "rows": rows, "wall_s": wall, "run_dir": run_dir}


def summarise(results: list[dict], metric: str, threshold: float) -> list[dict[str, object]]:
    """One table row per seed."""
    table = []
    for r in results:
        rows = r["rows"]
        eval_rows = [row for row in rows if "eval/return_mean" in row]
        evals = [row["eval/return_mean"] for row in eval_rows]
        table.append({
            "seed": r["seed"],
            "reached_at_steps": first_reach(rows, metric, threshold),
            # the last epoch that logged the metric (evaluation metrics are not logged every epoch)
            f"final {metric}": next((row[metric] for row in reversed(rows) if metric in row), None),
            "final eval": evals[-1] if evals else None,
            # where it was logged: a run whose last epoch did not evaluate gets one more evaluation after
            # training, which its closing line and summary.json hold and progress.csv does not
            "final eval at steps": eval_rows[-1]["env_steps"] if eval_rows else None,
            "best eval": max(evals) if evals else None,
            "env_steps": rows[-1]["env_steps"],
            "train_time_s": rows[-1].get("time/total_s"),
            "wall_s": r["wall_s"],
        })
    return table


def fmt(v: object) -> str:
    """Format one table cell."""
    if v is None:
        return "not reached"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return str(v)


def plot(results: list[dict], metric: str, path: Path, title: str) -> bool:
    """Learning curve (metric vs environment steps): mean over seeds with a +- std band, drawn by
    ``corral plot``'s implementation (corral.results.plot); False without matplotlib or data."""
    import importlib.util

    from corral.results.plot import draw, mean_curve

    if importlib.util.find_spec("matplotlib") is None:
        return False
    series = [([row["env_steps"] for row in r["rows"] if metric in row],
               [row[metric] for row in r["rows"] if metric in row]) for r in results]
    curve = mean_curve(f"seeds {', '.join(str(r['seed']) for r in results)}", series)
    return curve is not None and draw([curve], path, metric, title) == 1


# ------------------------------------------------------------------------------ --peer sb3
#: Peer frameworks ``--peer`` can run: name -> runner script (``--config``, ``--seed``, ``--out``).
PEERS = {"sb3": ROOT / "experiments" / "peers" / "sb3_runner.py"}


def run_peer_seed(name: str, seed: int, peer: str, config: Path) -> dict[str, object]:
    """Run the peer framework's version of the composed corral ``config`` for one seed."""
    run_dir = ROOT / "experiments" / "runs" / name / f"{peer}_seed{seed}"
    cmd = [sys.executable, str(PEERS[peer]), "--config", str(config), "--seed", str(seed), "--out", str(run_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{peer} seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = read_progress(run_dir / "progress.csv")
    return {"seed": seed, "rows": rows, "wall_s": wall, "run_dir": run_dir, "log": proc.stdout}


def run_interleaved(name: str, seeds: list[int], overrides: list[str], peer: str) -> tuple[list[dict], list[dict]]:
    """corral seed 1, peer seed 1, corral seed 2, ...: machine load affects both alike.

    The peer reads each corral seed's resolved config (``<run>/.hydra/config.yaml``).
    """
    ours, theirs = [], []
    for s in seeds:
        ours.append(run_seed(name, s, overrides))
        theirs.append(run_peer_seed(name, s, peer, Path(ours[-1]["run_dir"]) / ".hydra" / "config.yaml"))
    return ours, theirs


def recorded(name: str, run: str, seed: int, peer: str | None = None) -> dict[str, object]:
    """A seed's run already under ``experiments/runs/<name>/<run>`` (``--record-only``); its wall
    time is the run's own ``time/total_s``, and a peer run's mapping is printed again by its runner."""
    run_dir = ROOT / "experiments" / "runs" / name / run
    path = run_dir / "progress.csv"
    if not path.is_file():
        raise SystemExit(f"learning.py: error: --record-only: {path} does not exist; run that seed first")
    rows = read_progress(path)
    log = ""
    if peer is not None:
        config = ROOT / "experiments" / "runs" / name / f"seed{seed}" / ".hydra" / "config.yaml"
        cmd = [sys.executable, str(PEERS[peer]), "--config", str(config), "--seed", str(seed), "--out", str(run_dir),
               "--dry-run"]
        log = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout
    return {"seed": seed, "rows": rows, "wall_s": rows[-1].get("time/total_s", 0.0), "run_dir": run_dir, "log": log}


def last_value(rows: list[dict[str, float]], metric: str) -> float | None:
    """The last value ``metric`` took in a run (None if it never appeared)."""
    values = [row[metric] for row in rows if metric in row]
    return values[-1] if values else None


def per_step_time(result: dict) -> float:
    """Training wall time (``time/total_s``, evaluation included) per environment step."""
    last = result["rows"][-1]
    return last["time/total_s"] / last["env_steps"]


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below the mean
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f


def welch_t_test(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's two-sided t-test of equal means: (t, degrees of freedom, p-value). Needs 2+ values in each."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least two values on each side")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    if va + vb == 0.0:
        return (0.0 if ma == mb else math.copysign(math.inf, ma - mb)), math.nan, 1.0 if ma == mb else 0.0
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, df, _betainc(df / 2.0, 0.5, df / (df + t * t))


def peer_summary(ours: list[dict], theirs: list[dict], metric: str, peer: str,
                 time_target: float = 1.2) -> list[str]:
    """Markdown lines: corral's final ``metric`` against the spread of the peer's seeds, and the
    wall time per environment step ratio corral / peer (issue 6's target: <= ``time_target``)."""
    lines = ["## corral vs " + peer, ""]
    for label, m in ((metric, metric), ("eval/return_mean", "eval/return_mean")):
        a = [v for v in (last_value(r["rows"], m) for r in ours) if v is not None]
        b = [v for v in (last_value(r["rows"], m) for r in theirs) if v is not None]
        if not a or not b:
            continue
        mean_a = sum(a) / len(a)
        verdict = ("above the best of" if mean_a > max(b) else "within the spread of" if mean_a >= min(b)
                   else "BELOW the spread of")
        lines.append(f"- final {label}: corral mean {mean_a:,.1f} (seeds {', '.join(f'{v:,.1f}' for v in a)}); "
                     f"{peer} seeds {min(b):,.1f} .. {max(b):,.1f} -> corral is {verdict} {peer}'s seeds.")
        if len(a) >= 2 and len(b) >= 2:
            t, df, p = welch_t_test(a, b)
            mean_b = sum(b) / len(b)
            lines.append(f"  corral mean - {peer} mean = {mean_a - mean_b:+,.1f} ({peer} mean {mean_b:,.1f}); Welch's "
                         f"t-test over {len(a)} + {len(b)} seeds: t = {t:.2f}, df = {df:.1f}, p = {p:.2f}.")
        if m == metric == "eval/return_mean":
            break
    ta = [per_step_time(r) for r in ours]
    tb = [per_step_time(r) for r in theirs]
    ratio = (sum(ta) / len(ta)) / (sum(tb) / len(tb))
    ok = "meets" if ratio <= time_target else "MISSES"
    lines.append(f"- wall time per environment step (time/total_s / env_steps, evaluation included): corral "
                 f"{1e6 * sum(ta) / len(ta):,.1f} us, {peer} {1e6 * sum(tb) / len(tb):,.1f} us; ratio corral/{peer} = "
                 f"{ratio:.2f}x ({ok} the <= {time_target:g}x target).")
    return lines


def plot_frameworks(groups: dict[str, list[dict]], metric: str, path: Path, title: str) -> bool:
    """Mean and min-max band over seeds of ``metric`` vs environment steps, one colour per framework."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, results in groups.items():
        curves = [([row["env_steps"] for row in r["rows"] if metric in row],
                   [row[metric] for row in r["rows"] if metric in row]) for r in results]
        curves = [c for c in curves if c[0]]
        if not curves:
            continue
        # Seeds log at slightly different steps (corral's batches are whole episodes): common grid.
        grid = np.asarray(curves[0][0])
        ys = np.stack([np.interp(grid, xs, vs) for xs, vs in curves])
        (line,) = ax.plot(grid, ys.mean(axis=0), label=f"{label} (mean of {len(curves)} seeds)" if len(curves) > 1 else f"{label} (1 seed)")
        ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main() -> None:
    """Parse arguments, run every seed, write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="results name (file stem)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--metric", default="train/return_mean", help="progress.csv column to judge")
    parser.add_argument("--threshold", type=float, required=True, help="value the metric must reach")
    parser.add_argument("--note", default="", help="a line to record with the results (e.g. machine load)")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "experiments" / "results",
                        help="where the table and the plot go")
    parser.add_argument("--peer", choices=sorted(PEERS), default=None,
                        help="also run this framework's same algorithm (seeds interleaved) and compare")
    parser.add_argument("--time-target", type=float, default=1.2,
                        help="with --peer: the target ratio of corral's wall time per step to the peer's "
                             "(issue 6: 1.2; issue 22, MuJoCo PPO: 0.7)")
    parser.add_argument("--record-only", action="store_true",
                        help="run nothing: write the table and plot from the seeds' runs already under "
                             "experiments/runs/<name>/ (a comparison stopped part-way; wall_s is then each "
                             "run's own time/total_s)")
    parser.add_argument("overrides", nargs="*", help="train.py overrides (after --)")
    args = parser.parse_args()

    peer_results: list[dict] = []
    if args.record_only:
        results = [recorded(args.name, f"seed{s}", s) for s in args.seeds]
        if args.peer:
            peer_results = [recorded(args.name, f"{args.peer}_seed{s}", s, args.peer) for s in args.seeds]
    elif args.peer:
        results, peer_results = run_interleaved(args.name, args.seeds, args.overrides, args.peer)
    else:
        results = [run_seed(args.name, s, args.overrides) for s in args.seeds]
    table = summarise(results, args.metric, args.threshold)
    if args.peer:
        table = [{"framework": "corral", **row} for row in table]
        table += [{"framework": args.peer, **row} for row in summarise(peer_results, args.metric, args.threshold)]
    out_dir = args.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python experiments/learning.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    import torch

    lines = [
        f"# {args.name}",
        "",
        f"Command: `{command}`  ",
        f"Each seed: `python train.py {' '.join(args.overrides)} seed=<seed>`  ",
        f"Recorded {dt.datetime.now().isoformat(timespec='minutes')} on {platform.node()} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}).",
        "",
        f"Threshold: {args.metric} >= {args.threshold:g}",
        "",
        *([args.note, ""] if args.note else []),
        "| " + " | ".join(table[0]) + " |",
        "|" + "---|" * len(table[0]),
    ]
    lines += ["| " + " | ".join(fmt(v) for v in row.values()) + " |" for row in table]
    reached = [row["reached_at_steps"] for row in table if row.get("framework", "corral") == "corral"]
    verdict = "all seeds reached it" if all(x is not None for x in reached) else "NOT every seed reached it"
    lines += ["", "final eval: the last evaluation in progress.csv, at the step in 'final eval at steps' (a run "
              "whose last epoch did not evaluate gets one more evaluation after training; its closing line and "
              "summary.json hold that one)."]
    lines += ["", f"Result{' (corral)' if args.peer else ''}: {verdict}"
              + (f"; slowest at {max(reached):,.0f} env steps." if all(reached) else ".")]
    if args.peer:
        lines += ["", *peer_summary(results, peer_results, args.metric, args.peer, args.time_target)]
        lines += ["", f"{args.peer} runs: `python {PEERS[args.peer].relative_to(ROOT)} --config "
                  f"<corral seed run>/.hydra/config.yaml --seed <seed> --out <dir>`; its mapping of the config:",
                  "", "    " + str(peer_results[0].get("log", "")).strip().replace("\n", "\n    ")]
        drawn = plot_frameworks({"corral": results, args.peer: peer_results}, args.metric,
                                out_dir / f"{args.name}.png", args.name)
    else:
        drawn = plot(results, args.metric, out_dir / f"{args.name}.png", args.name)
    if drawn:
        lines += ["", f"![learning curves]({args.name}.png)"]
    (out_dir / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
