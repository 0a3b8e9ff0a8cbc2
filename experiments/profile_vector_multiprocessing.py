"""Where the time goes when ``sampler=multiprocessing`` runs two ``worker=vector`` workers (issue 20's 1.3x target).

    python experiments/profile_vector_multiprocessing.py --out experiments/results/profile_vector_multiprocessing.md

The benchmark's row ``multiprocessing 2 x vector(native, 128)`` is measured beside ``local + vector(native,
256)`` (its baseline) and ``local + vector(native, 128)`` (one worker's whole job done in this process),
for whole episodes, fragments and carried whole episodes, built exactly as ``bench_sampling.py`` builds
them (same policy, seed and steps per call). Rows are measured round-robin; each measurement reads the
CPU time of this process and of each worker process from /proc, so the table shows how much of the wall
time each worker and the sampler's process were busy, the time of one ``obtain_samples`` call, and how
long a worker waits per call (for the other worker, for the sampler to read both batches, and for the
next update). The ideal ratio is what two workers as fast as one local 128-environment worker give:
``2 x local(128) / local(256)``. The row ``multiprocessing 1 x 128`` (one worker process, the sampler's
process waiting) separates what a worker process costs by itself (its ratio to ``local 128``) from what
two workers cost each other. With ``--out`` the table goes to a markdown file with the command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))

from sampling_bench.harness import BenchContext, _cpu_of  # noqa: E402
from sampling_bench.report import emit, profile_document  # noqa: E402
from sampling_bench.vector import vector_row  # noqa: E402

#: mode -> (fragments, carry) of the benchmark's vector rows
MODES = {"whole episodes": (False, False), "fragments": (True, False), "carried whole episodes": (False, True)}


def measure(runner: Any, budget_s: float) -> dict[str, Any]:
    """Steps/s, calls, and the busy fraction (CPU / wall) of this process and of each worker process."""
    pids = [os.getpid(), *runner.child_pids()]
    calls0 = runner.itr
    before = _cpu_of(set(pids)) or {}
    steps, wall, _ = runner.run(budget_s)
    after = _cpu_of(set(pids)) or {}
    busy = [(after[p] - before[p]) / wall if p in before and p in after else float("nan") for p in pids]
    return {"steps_per_s": steps / wall, "call_ms": wall / max(1, runner.itr - calls0) * 1e3,
            "sampler_busy": busy[0], "worker_busy": busy[1:]}


def main() -> None:
    """Parse arguments, build the rows of every mode, measure them round-robin and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per row (round-robin)")
    parser.add_argument("--batch-size", type=int, default=4096, help="as bench_sampling.py's --batch-size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the table to")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # what corral's trainer and worker processes use
    ctx = BenchContext(env_id="CartPole-v1", seed=args.seed, batch_size=args.batch_size)
    lines = []
    for mode, (frag, carry) in MODES.items():
        specs = {"local 128": vector_row("native", 128, fragments=frag, carry=carry),
                 "local 256": vector_row("native", 256, fragments=frag, carry=carry),
                 "multiprocessing 2 x 128": vector_row("native", 128, sampler="multiprocessing", n_workers=2,
                                                       fragments=frag, carry=carry),
                 "multiprocessing 1 x 128": vector_row("native", 128, sampler="multiprocessing", n_workers=1,
                                                       fragments=frag, carry=carry)}
        runners = {name: spec.build(ctx) for name, spec in specs.items()}
        try:
            for runner in runners.values():
                runner.run(0.5)  # warm-up
            results: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
            for _ in range(args.rounds):
                for name, runner in runners.items():
                    results[name].append(measure(runner, args.budget))
        finally:
            for runner in runners.values():
                runner.close()
        med = {name: {k: statistics.median(r[k] for r in rs) for k in ("steps_per_s", "call_ms", "sampler_busy")}
               for name, rs in results.items()}
        mp_busy = [statistics.median(r["worker_busy"][i] for r in results["multiprocessing 2 x 128"]) for i in range(2)]
        one = med["multiprocessing 1 x 128"]["steps_per_s"]
        one_busy = statistics.median(r["worker_busy"][0] for r in results["multiprocessing 1 x 128"])
        ratio = med["multiprocessing 2 x 128"]["steps_per_s"] / med["local 256"]["steps_per_s"]
        ideal = 2 * med["local 128"]["steps_per_s"] / med["local 256"]["steps_per_s"]
        call = med["multiprocessing 2 x 128"]["call_ms"]
        waits = ", ".join(f"{(1 - b) * call:.1f}" for b in mp_busy)
        lines.append(
            f"| {mode} | {med['local 128']['steps_per_s']:,.0f} | {med['local 256']['steps_per_s']:,.0f} | "
            f"{med['multiprocessing 2 x 128']['steps_per_s']:,.0f} | {ratio:.2f}x | {ideal:.2f}x | {call:.1f} | "
            f"{', '.join(f'{b:.2f}' for b in mp_busy)} | {waits} | {med['multiprocessing 2 x 128']['sampler_busy']:.2f} | "
            f"{one:,.0f} | {one / med['local 128']['steps_per_s']:.2f}x | {one_busy:.2f} |")
    header = ("| mode | local 128: steps/s | local 256: steps/s | mp 2 x 128: steps/s | mp / local 256 | ideal "
              "(2 x local 128 / local 256) | mp: ms per call | mp: workers busy | mp: each worker's wait per call (ms) | "
              "mp: sampler's process busy | mp 1 x 128: steps/s | mp 1 x 128 / local 128 | mp 1 x 128: worker busy |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    emit(profile_document(
        "multiprocessing 2 x vector(native, 128): where the time goes (CartPole-v1)",
        f"{args.rounds} measurements of {args.budget} s per row, round-robin within each mode; medians. Busy: "
        "CPU seconds (user + system, all threads, from /proc) over wall seconds. A worker's wait per call is "
        "(1 - busy) x the time of one call.", header, lines), args.out)


if __name__ == "__main__":
    main()
