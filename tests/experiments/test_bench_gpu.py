"""experiments/bench_gpu.py: without a GPU it says so (and records it); with one, a quick run works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "bench_gpu.py"


def test_bench_gpu_reports_a_missing_gpu_or_runs(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--budget", "0.02",
                           "--batch-size", "64", "--envs", "CartPole-v1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    text = out.read_text()
    if torch.cuda.is_available():
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "action_server on cuda vs multiprocessing" in text
    else:
        assert proc.returncode == 2
        assert "no GPU available" in proc.stderr
        assert "No GPU was available in this session" in text and "Command: `" in text
