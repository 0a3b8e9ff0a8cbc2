"""Sampling throughput: corral's samplers and workers against raw gymnasium loops and vector envs.

    python experiments/bench_sampling.py                      # CartPole-v1, the CPU-heavy CartPole (and
                                                              # HalfCheetah-v5 where MuJoCo is installed)
    python experiments/bench_sampling.py --envs CartPole-v1 --budget 3 --repeats 5
    python experiments/bench_sampling.py --quick              # small budget (CI smoke test)
    python experiments/bench_sampling.py --quick --no-ray     # ... without Ray (no Ray runtime started)
    python experiments/bench_sampling.py --rows ray local/vec # only rows whose key contains one of these
    python experiments/bench_sampling.py --list               # the row keys

The one entry point of the benchmark package ``experiments/sampling_bench/`` (shared harness and
reporting, one module per family of rows; its docstring says what every row measures). Every name
of the package is importable from here, as it was when the benchmark was one file.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # the package next to this script, also when this file is loaded by path
    sys.path.insert(0, str(HERE))
if str(ROOT) not in sys.path:  # run from a checkout without installing (an installed corral wins)
    sys.path.append(str(ROOT))

from sampling_bench import *  # noqa: E402,F401,F403 - this script's names are the package's
from sampling_bench import __all__ as _PACKAGE_NAMES  # noqa: E402
from sampling_bench import cli as _cli  # noqa: E402
from sampling_bench import settings as _settings  # noqa: E402
from sampling_bench.rows import HEAVY_ROW_KEYS, default_targets  # noqa: E402
from sampling_bench.settings import SERVER_DEVICE  # noqa: E402

__all__ = [*_PACKAGE_NAMES]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (:func:`sampling_bench.cli.main`) with this module's ``SERVER_DEVICE``,
    ``default_targets`` and ``HEAVY_ROW_KEYS``, which a caller may replace first
    (``experiments/bench_gpu.py`` runs the action-server rows on cuda with its own target)."""
    _settings.SERVER_DEVICE = SERVER_DEVICE
    return _cli.main(argv, targets=default_targets, heavy_row_keys=HEAVY_ROW_KEYS)


if __name__ == "__main__":
    raise SystemExit(main())
