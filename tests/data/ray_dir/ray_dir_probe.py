"""Run by tests/test_suite_ray_dir.py in a pytest of its own (named on its command line; the suite
does not collect it): Ray runtimes started the way the suite's tests start them, in this process
and in a child, recording where Ray put their session directories."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import ray

#: A child that starts a Ray runtime of its own, as train.py under a test does, and prints its session directory.
CHILD = ("import ray; ray.init(address='local', num_cpus=1, include_dashboard=False, configure_logging=False, "
         "log_to_driver=False); print(ray._private.worker._global_node.get_session_dir_path()); ray.shutdown()")


def test_ray_sessions() -> None:
    out = Path(os.environ["PROBE_OUT"])
    lines = [f"RAY_TMPDIR {os.environ.get('RAY_TMPDIR', '')}"]
    if os.environ.get("PROBE_CHILD"):
        child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr[-3000:]
        lines.append(f"SESSION {child.stdout.strip().splitlines()[-1]}")
    ray.init(address="local", num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
    lines.append(f"SESSION {ray._private.worker._global_node.get_session_dir_path()}")
    out.write_text("\n".join(lines) + "\n")
    if os.environ.get("PROBE_WAIT"):
        out.write_text(out.read_text() + "WAITING\n")
        time.sleep(120)  # until the test interrupts this pytest, as Ctrl-C does
