"""The command line: flags, the run (two phases: without Ray, then Ray), and the written tables."""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from pathlib import Path
from typing import Callable

from . import __doc__ as PACKAGE_DOC
from . import settings
from .harness import BenchContext, Result, Target, measure, select
from .processes import leftovers, machine_info, start_ray
from .report import step_parts_table, table, targets_table
from .rows import HEAVY_ROW_KEYS, default_rows, default_targets, heavy_label
from .samplers import CallCost, call_cost_specs, call_cost_table, measure_call_cost
from .server import server_step_table
from .settings import CALL_COST_ENV, DEFAULT_ENVS, DEFAULT_OUT, HEAVY_HIDDEN
from .vector import rows_for, vector_floor_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=PACKAGE_DOC.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="gymnasium ids (default: %(default)s)")
    p.add_argument("--heavy-envs", nargs="*", default=["CartPole-v1"],
                   help="environments measured again with the heavier policy (MLP 512x512) and the rows where "
                        "batching matters (default: %(default)s; none: skip)")
    p.add_argument("--quick", action="store_true", help="small budget and batch (smoke test)")
    p.add_argument("--budget", type=float, default=None, help="seconds per measurement (default 2.0; quick 0.1)")
    p.add_argument("--repeats", type=int, default=None, help="measurements per row (default 5; quick 1)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up seconds per row (default 0.5; quick 0)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="steps per obtain_samples call (default 4096; quick 256)")
    p.add_argument("--calls", type=int, default=None,
                   help="timed calls per sampler for the per-call cost table (default 200; quick 5; 0: skip it)")
    p.add_argument("--rows", nargs="+", default=None, metavar="KEY",
                   help="only rows (and per-call-cost samplers) whose key contains one of these, e.g. "
                        "'ray' 'local/vec/1x32' 'gym_async' (keys: see --list)")
    p.add_argument("--no-ray", action="store_true", help="leave out the Ray rows (no Ray runtime is started)")
    p.add_argument("--list", action="store_true", help="print the row keys and exit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--note", default="", help="a line written under the header (e.g. what else was running)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown output (default: %(default)s)")
    args = p.parse_args(argv)
    q = args.quick
    args.budget = args.budget if args.budget is not None else (0.1 if q else 2.0)
    args.repeats = args.repeats if args.repeats is not None else (1 if q else 5)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if q else 0.5)
    args.batch_size = args.batch_size if args.batch_size is not None else (256 if q else 4096)
    args.calls = args.calls if args.calls is not None else (5 if q else 200)
    return args


NOTES = """Notes:
- Start-up is never measured: every row is built (worker processes spawned, Ray actors placed, \
AsyncVectorEnv processes started) and warmed up before measuring starts; samplers are called with a \
fresh parameter update every call, as a trainer does.
- vs local (same worker): a parallel sampler's steps/s over the local sampler's with one worker of the \
same type and the same total number of environments (2 x vec(16) vs one vec(32)); for the default worker, \
which steps one environment at a time, the baseline is the one-worker local row (the `local + default \
(2 workers)` row shows that a second local worker, run after the first, gives the same rate).
- gym AsyncVectorEnv "2 procs x SyncVectorEnv(16)": gymnasium's AsyncVectorEnv runs one sub-environment \
per process, so 2 processes x 16 environments is an AsyncVectorEnv over 2 sub-environments that are \
each a SyncVectorEnv of 16 (outer autoreset disabled, inner NEXT_STEP); the main process makes one \
batched policy call for all 32 per step; the inner envs' infos are not passed up (gymnasium's outer \
vector env cannot merge array infos such as HalfCheetah's), which saves gymnasium's row the outer merge. \
"32 procs" is the plain form (32 processes, 1 environment \
each). Processes start with the forkserver method.
- steps/CPU-s: for rows marked † the CPU time is this process's plus the row's worker processes' \
(and for Ray rows every Ray runtime process: raylet, GCS, idle workers), read from /proc; it is the \
machine's total CPU cost per step, not a speed.
- Ray: the Ray rows are measured after all the others, which run with no Ray runtime alive (its \
raylet, GCS and idle workers take CPU that a user of the other samplers never pays); then one runtime, \
`ray.init(address="local", num_cpus=2, include_dashboard=False)`, serves every Ray row (round-robin \
among themselves) and is shut down at the end; its background CPU counts against the Ray rows. Actors reserve num_cpus=0.5 each (a scheduling \
number only, so that both Ray rows of a table exist at once on 2 CPUs; actors use 1 torch thread).
- Action servers run with their default `spin_us=200`: a waiting worker (and the server) polls for its \
answer for up to 200 µs, yielding the CPU between polls, before sleeping on its semaphore. The polling \
CPU counts in their steps/CPU-s."""


def main(argv: list[str] | None = None, *, targets: Callable[[], list[Target]] = default_targets,
         heavy_row_keys: tuple[str, ...] = HEAVY_ROW_KEYS) -> int:
    """Run the benchmark, print the tables and write them to ``--out``; ``targets`` and ``heavy_row_keys``
    replace the default speed targets and heavier-policy rows (``experiments/bench_gpu.py`` passes its own)."""
    args = parse_args(argv)
    rows = select(default_rows(), args.rows, args.no_ray)
    specs = select(call_cost_specs(), args.rows, args.no_ray) if args.calls > 0 else []
    if args.list:
        print("\n".join(f"{r.key:32s} {r.method} (N={r.n})" for r in default_rows()))
        return 0
    import torch

    torch.set_num_threads(1)  # what corral's trainer and worker processes use
    command = shlex.join(["python", *(sys.argv if argv is None else ["experiments/bench_sampling.py", *argv])])
    started = dt.datetime.now().astimezone()
    header = [
        "# Sampling throughput",
        "",
        f"Command: `{command}`",
        "",
        f"Date: {started:%Y-%m-%d %H:%M %Z}",
        "",
        machine_info(),
        "",
        f"Settings: budget {args.budget:g} s per measurement, {args.repeats} repeats (median reported), "
        f"warm-up {args.warmup:g} s, obtain_samples batch {args.batch_size} steps, seed {args.seed}, "
        "policy MLPPolicy 64x64 tanh (stochastic; 512x512 in the tables that say so), torch threads 1, "
        f"action-server rows on device={settings.SERVER_DEVICE}.",
        "",
        "Columns: steps/s is environment steps per wall-clock second (median over repeats; rows are "
        "measured round-robin); ± is half the range of the repeats, in percent of the median. steps/CPU-s divides by CPU time instead, which other processes on a "
        "shared machine disturb much less († = summed over several processes, see the notes). "
        "Ratios are between medians of this run.",
        "",
        NOTES,
    ]
    if args.note:
        header += ["", args.note]
    print("\n".join(header), flush=True)
    sections = []
    targets_list = targets()
    ray = None
    try:
        heavy_rows = [r for r in rows if r.key in heavy_row_keys]
        tables = [(env_id, env_id, (64, 64), rows_for(env_id, rows)) for env_id in args.envs]
        tables += [(heavy_label(env_id, HEAVY_HIDDEN), env_id, HEAVY_HIDDEN, heavy_rows)
                   for env_id in args.heavy_envs if heavy_rows]
        # Two phases: every row but Ray's with no Ray runtime running (its raylet, GCS and idle
        # workers take CPU a user of the other samplers never pays), then the Ray runtime is started
        # once for the Ray rows of every table and the Ray per-call costs.
        measured: dict[str, list[Result]] = {}
        seconds: dict[str, float] = {}
        costs: list[CallCost] = []
        for phase in ("without Ray", "Ray"):
            phase_rows = [(label, env_id, hidden, [r for r in t_rows if (r.sampler == "ray") == (phase == "Ray")])
                          for label, env_id, hidden, t_rows in tables]
            phase_specs = [spec for spec in specs if (spec.sampler == "ray") == (phase == "Ray")]
            if not any(r for *_, r in phase_rows) and not phase_specs:
                continue
            if phase == "Ray":
                ray = start_ray()
            for label, env_id, hidden, table_rows in phase_rows:
                if not table_rows:
                    continue
                print(f"\nmeasuring {label} ({phase}) ...", flush=True)
                ctx = BenchContext(env_id=env_id, seed=args.seed, batch_size=args.batch_size, hidden_sizes=hidden)
                t0 = time.perf_counter()
                measured.setdefault(label, []).extend(measure(ctx, table_rows, args.budget, args.warmup, args.repeats))
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t0
            if phase_specs:
                print(f"\nmeasuring the fixed cost of one obtain_samples call ({args.calls} calls each, {phase}) ...",
                      flush=True)
            for spec in phase_specs:
                try:
                    costs.append(measure_call_cost(spec, args.seed, args.calls))
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    costs.append(CallCost(spec, error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300]))
        for label, _env_id, _hidden, table_rows in tables:
            if label not in measured:
                continue
            order = {id(spec): k for k, spec in enumerate(table_rows)}
            results = sorted(measured[label], key=lambda res: order[id(res.spec)])
            text = f"## {label}\n\n{table(results)}\n\n({seconds[label]:.0f} s for this table)"
            st = server_step_table(results)
            if st:
                text += f"\n\nAction servers' synchronised step ({label}):\n\n{st}"
            tt = targets_table(label, results, targets_list)
            if tt:
                text += f"\n\nSpeed targets (issues 2, 4, 5 and 20) on {label}:\n\n{tt}"
            vt = vector_floor_table(results)
            if vt:
                text += f"\n\nworker=vector beside its floor ({label}):\n\n{vt}"
            parts = step_parts_table(results)
            if parts:
                text += f"\n\nWhere one step of 32 environments goes ({label}):\n\n{parts}"
            print("\n" + text, flush=True)
            sections.append(text)
        if specs:
            order = {id(spec): k for k, spec in enumerate(specs)}
            costs.sort(key=lambda cost: order[id(cost.spec)])
            update_kb = max((c.update_bytes for c in costs), default=0) / 1024
            text = (
                "## Fixed cost of one obtain_samples call\n\n"
                f"Method: each sampler is built on {CALL_COST_ENV} with `max_episode_length=1` and called "
                f"`obtain_samples(itr, 1, update)` {args.calls} times after 5 warm-up calls: every worker resets its "
                "environments and takes one step each (one 1-step episode per environment), so a call is almost "
                "only the per-call machinery: the agent update (`policy.get_param_values()`, "
                f"{update_kb:.1f} KiB pickled) shipped and loaded, the request, the episodes sent back and "
                "concatenated. Calls with `update=None` alternate with them; the difference is the update's "
                "share. Median and 90th percentile over the calls (start-up excluded). The local rows are the "
                "in-process floor (the sampling itself).\n\n" + call_cost_table(costs)
            )
            print("\n" + text, flush=True)
            sections.append(text)
    finally:
        if ray is not None:
            ray.shutdown()
    left = leftovers()
    footer = (f"finished {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {machine_info()}\n\n"
              f"processes and shared-memory segments left after shutdown: {'; '.join(left) if left else 'none'}")
    print("\n" + footer)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(header) + "\n\n" + "\n\n".join(sections) + "\n\n" + footer + "\n")
        print(f"wrote {args.out}")
    return 1 if left else 0
