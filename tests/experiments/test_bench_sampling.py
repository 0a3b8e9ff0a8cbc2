"""Smoke test of experiments/bench_sampling.py: it runs, prints every row and writes its table.

Timings are never asserted (the machine is shared); only that the benchmark completes and reports.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "bench_sampling.py"
ENVS = ["CartPole-v1", "corral/CPUHeavyCartPole-v1"]


def load_bench() -> ModuleType:
    """The benchmark module, loaded by path (``experiments`` is not a package)."""
    name = "corral_bench_sampling"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_quick_run_prints_every_row_and_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "bench.md"
    cmd = [sys.executable, str(SCRIPT), "--quick", "--budget", "0.02", "--batch-size", "64",
           "--envs", *ENVS, "--out", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "cpu_count=" in text and "gymnasium" in text and "torch" in text
    assert "--quick" in text  # the exact command is printed
    rows = load_bench().default_rows()
    assert rows
    written = out.read_text()
    assert written.startswith("# Sampling throughput") and "Command: `" in written and "Date: " in written
    for env_id in ENVS:
        section = written.split(f"## {env_id}\n", 1)[1].split("\n## ", 1)[0]
        assert "| method | N | steps/s | vs SyncVectorEnv (same N) | vs raw random loop |" in section
        lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| method")]
        assert len(lines) == len(rows), section
        for row, line in zip(rows, lines):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert cells[0] == row.method and cells[1] == str(row.n), line
            assert "failed" not in cells[2], line
            assert float(cells[2].replace(",", "")) > 0, line
        assert f"## {env_id}" in text  # and the same table went to stdout
