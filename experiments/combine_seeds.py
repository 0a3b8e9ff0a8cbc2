"""Combine per-seed ``experiments/learning.py`` results (seeds run as parallel invocations) into one table.

    python experiments/combine_seeds.py --name dqn_cartpole --metric eval/return_mean --threshold 475 \\
        --parts dqn_cartpole_seed1 dqn_cartpole_seed2 dqn_cartpole_seed3

Each part is a learning.py ``--name`` with one seed; its runs are read from
``experiments/runs/<part>/seed<s>/progress.csv`` and its command from
``experiments/results/<part>.md``. A part whose results file is not written yet is still running:
its row shows how far it got, marked "in progress". Writes ``experiments/results/<name>.md`` and
a learning-curve PNG next to it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning  # noqa: E402 - the sibling script's table and plot helpers

ROOT = Path(__file__).resolve().parents[1]


def load_part(part: str) -> tuple[dict, str | None, bool]:
    """(result for learning.summarise, the part's command or None, finished?)."""
    seed_dirs = sorted((ROOT / "experiments" / "runs" / part).glob("seed*"))
    if len(seed_dirs) != 1:
        raise SystemExit(f"{part}: expected one seed directory, found {[d.name for d in seed_dirs]}")
    run_dir = seed_dirs[0]
    rows = learning.read_progress(run_dir / "progress.csv")
    md = ROOT / "experiments" / "results" / f"{part}.md"
    command, wall = None, None
    if md.is_file():
        text = md.read_text()
        m = re.search(r"^Command: `(.*)`", text, flags=re.M)
        command = m.group(1) if m else None
        row = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| seed")]
        if row:
            wall = float(row[0].strip("| ").split("|")[-1].strip().replace(",", ""))
    seed = int(run_dir.name.removeprefix("seed"))
    return {"seed": seed, "rows": rows, "wall_s": wall, "run_dir": run_dir}, command, md.is_file()


def main() -> None:
    """Parse arguments, read the parts, write the combined results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="combined results name (file stem)")
    parser.add_argument("--parts", nargs="+", required=True, help="learning.py --name of each seed's run")
    parser.add_argument("--metric", default="eval/return_mean")
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--note", default="")
    args = parser.parse_args()

    loaded = [load_part(p) for p in args.parts]
    results = [r for r, _, _ in loaded]
    table = learning.summarise(results, args.metric, args.threshold)
    for row, (_, _, finished) in zip(table, loaded):
        if not finished:
            row["wall_s"] = "in progress"
    out = ROOT / "experiments" / "results"
    lines = [
        f"# {args.name}",
        "",
        "Combined by: `python experiments/combine_seeds.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]) + "`",
        "",
        "Seeds (one learning.py invocation each, run in parallel):",
        "",
    ]
    for part, (_, command, _finished) in zip(args.parts, loaded):
        lines.append(f"- `{command}`" if command else f"- `{part}`: still running when this table was written")
    lines += ["", f"Threshold: {args.metric} >= {args.threshold:g}", ""]
    if args.note:
        lines += [args.note, ""]
    lines += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    lines += ["| " + " | ".join(learning.fmt(v) for v in row.values()) + " |" for row in table]
    reached = [row["reached_at_steps"] for row in table]
    verdict = "all seeds reached it" if all(x is not None for x in reached) else "NOT every seed reached it"
    lines += ["", f"Result: {verdict}" + (f"; slowest at {max(reached):,.0f} env steps." if all(reached) else ".")]
    if learning.plot(results, args.metric, out / f"{args.name}.png", args.name):
        lines += ["", f"![learning curves]({args.name}.png)"]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
