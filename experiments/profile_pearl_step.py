"""Time one PEARL gradient step of a preset, to see what a training budget costs on this machine.

    python experiments/profile_pearl_step.py experiment=pearl_cheetah_vel --steps 10 --out experiments/results/pearl_gradient_step.md

Builds the run from the overrides (like ``train.py``), fills the per-task buffers with one epoch
of ``trainer.batch_size`` steps, then times ``--steps`` gradient steps (meta-batch draw included)
and profiles a few more with cProfile; prints the figures and where the time goes, and with
``--out`` writes them with the command that made them.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import shlex
import sys
import time
from pathlib import Path


def main() -> None:
    """Parse arguments, build the run, time and profile gradient steps."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. experiment=pearl_cheetah_vel")
    parser.add_argument("--steps", type=int, default=10, help="gradient steps timed")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the result to")
    args = parser.parse_args()

    import hydra
    import torch

    from corral.framework.compose import build
    from corral.framework.entry import prepare

    torch.set_num_threads(1)
    overrides = prepare([*args.overrides, "logger=[]", "trainer.eval_every=0"])
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        cfg = hydra.compose(config_name="config", overrides=overrides)
    run = build(cfg)
    try:
        algo = run.algo
        t0 = time.perf_counter()
        algo.store(algo.sample(0, int(cfg.trainer.batch_size)))
        sample_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            algo.gradient_step(algo.sample_tasks())
        step_s = (time.perf_counter() - t0) / args.steps
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(3):
            algo.gradient_step(algo.sample_tasks())
        profile.disable()
    finally:
        run.close()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(6)
    c = cfg.algo
    per_epoch = c.gradient_steps if c.gradient_steps is not None else c.utd_ratio * cfg.trainer.batch_size
    lines = [
        f"one epoch of {cfg.trainer.batch_size:,} environment steps sampled and stored: {sample_s:.1f} s",
        f"gradient step ({c.meta_batch} tasks x {c.batch_size} transitions, critics {list(c.qf_hidden_sizes)}, "
        f"context {c.context_size} per task): {step_s * 1e3:.0f} ms (mean of {args.steps}, torch threads 1)",
        f"gradient steps per epoch: {per_epoch:,.0f} -> {per_epoch * step_s / 60:.1f} min of updates per epoch, "
        f"{per_epoch * step_s * 1e6 / cfg.trainer.batch_size / 3600:.1f} h per million environment steps",
        f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
    ]
    print("\n".join(lines))
    print(text.getvalue())
    if args.out is not None:
        command = "python experiments/profile_pearl_step.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        args.out.write_text("\n".join([
            "# PEARL gradient-step cost", "", f"Command: `{command}`  ",
            f"Machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}.", "", *[f"- {line}" for line in lines], "",
            "cProfile of 3 gradient steps (top 6 by own time):", "", "```", text.getvalue().strip(), "```", "",
        ]))


if __name__ == "__main__":
    main()
