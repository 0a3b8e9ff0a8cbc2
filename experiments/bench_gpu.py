"""The action servers with their policy on a GPU, against the multiprocessing sampler's CPU policies.

    python experiments/bench_gpu.py                 # CartPole-v1 and the CPU-heavy CartPole, 64x64 and 512x512
    python experiments/bench_gpu.py --quick         # small budget (smoke test)

The same comparison as ``experiments/bench_sampling.py`` (same rows, runners, tables and speed
targets; see that script), restricted to the rows where the policy's place matters: gymnasium's
AsyncVectorEnv (2 processes x 16 environments, policy in this process on the cpu), the
multiprocessing sampler (2 workers x vec(16), a copy of the policy on the cpu in each worker), and
the action-server and alternating samplers (2 workers x vec(16)) with the policy on ``cuda``.
Issue 5's GPU target: ``action_server`` with the 512x512 policy at least 2x ``multiprocessing``.

Without a GPU it records that no GPU was available and exits with status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))
DEFAULT_OUT = ROOT / "experiments" / "results" / "bench_gpu.md"
ROW_KEYS = ["gym_async/2x16", "multiprocessing/vec/2x16", "action_server/vec/2x16", "alternating/vec/2x16"]


def load_bench():  # noqa: ANN201 - the bench_sampling module
    """experiments/bench_sampling.py, loaded by path (``experiments`` is not a package)."""
    from corral.testing.modules import import_path

    return import_path(ROOT / "experiments" / "bench_sampling.py", "corral_bench_sampling")


def gpu_target(bench) -> object:  # noqa: ANN001
    """action_server (cuda, 512x512) >= 2x multiprocessing (cpu policy per worker), CartPole-v1."""
    return bench.Target(bench.heavy_label("CartPole-v1", bench.HEAVY_HIDDEN),
                        bench.corral_key("action_server", "vec", 16, 2),
                        bench.corral_key("multiprocessing", "vec", 16, 2), 2.0,
                        "action_server on cuda vs multiprocessing (policy on cpu in each worker), 512x512 policy")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison on cuda, or record that no GPU is available."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown output (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="small budget (smoke test)")
    args, rest = p.parse_known_args(argv)
    import torch

    command = shlex.join(["python", "experiments/bench_gpu.py", *(sys.argv[1:] if argv is None else argv)])
    if not torch.cuda.is_available():
        text = (f"# Action servers on a GPU\n\nCommand: `{command}`\n\n"
                f"Date: {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, machine {platform.node()} "
                f"({platform.machine()}, torch {torch.__version__})\n\n"
                "No GPU was available in this session (torch.cuda.is_available() is false), so nothing was "
                "measured. Run this script on a machine with a CUDA GPU to record the comparison.\n")
        print("bench_gpu.py: no GPU available (torch.cuda.is_available() is false); nothing measured. "
              "Run it on a machine with a CUDA GPU.", file=sys.stderr)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
            print(f"wrote {args.out}")
        return 2
    bench = load_bench()
    bench.SERVER_DEVICE = "cuda"
    real_targets = bench.default_targets
    bench.default_targets = lambda: [*real_targets(), gpu_target(bench)]
    bench.HEAVY_ROW_KEYS = tuple(ROW_KEYS)
    name = torch.cuda.get_device_name(0)
    note = f"Recorded by `{command}`. GPU: {name}; the action-server rows run their policy on cuda, every other row on the cpu."
    forwarded = ["--no-ray", "--calls", "0", "--rows", *ROW_KEYS, "--out", str(args.out), "--note", note]
    if args.quick:
        forwarded.append("--quick")
    return bench.main([*forwarded, *rest])


if __name__ == "__main__":
    raise SystemExit(main())
