"""Run a corral configuration for several seeds and record what it learned.

    python experiments/learning.py --name ppo_cartpole --seeds 1 2 3 --threshold 475 -- worker=default

Each seed runs ``python train.py <overrides> seed=<s>`` in its own directory under
``experiments/runs/<name>/``; the results table (first environment step at which the metric
reached the threshold, final and best values, environment steps, wall time) goes to
``experiments/results/<name>.md`` together with the exact command, and a learning-curve PNG
to ``experiments/results/<name>.png`` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import shlex
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
        evals = [row["eval/return_mean"] for row in rows if "eval/return_mean" in row]
        table.append({
            "seed": r["seed"],
            "reached_at_steps": first_reach(rows, metric, threshold),
            f"final {metric}": rows[-1].get(metric),
            "final eval": evals[-1] if evals else None,
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
    """Learning curves (metric vs environment steps), one line per seed; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        xs = [row["env_steps"] for row in r["rows"] if metric in row]
        ys = [row[metric] for row in r["rows"] if metric in row]
        ax.plot(xs, ys, label=f"seed {r['seed']}")
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
    parser.add_argument("overrides", nargs="*", help="train.py overrides (after --)")
    args = parser.parse_args()

    results = [run_seed(args.name, s, args.overrides) for s in args.seeds]
    table = summarise(results, args.metric, args.threshold)
    out_dir = ROOT / "experiments" / "results"
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
    reached = [row["reached_at_steps"] for row in table]
    verdict = "all seeds reached it" if all(x is not None for x in reached) else "NOT every seed reached it"
    lines += ["", f"Result: {verdict}" + (f"; slowest at {max(reached):,.0f} env steps." if all(reached) else ".")]
    if plot(results, args.metric, out_dir / f"{args.name}.png", args.name):
        lines += ["", f"![learning curves]({args.name}.png)"]
    (out_dir / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
