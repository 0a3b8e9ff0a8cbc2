"""A ``submitit_local`` job's controller that leaves Ctrl-C to the job.

submitit starts one controller process per local job (``python -m submitit.local._local <folder>``),
which starts the job and waits for it, in the sweep's process group. The terminal's Ctrl-C reaches the
controller as well as its job, and submitit's controller then dies with a ``KeyboardInterrupt``
traceback, sending its job a second SIGINT (which corral's trainer takes as "stop now") and a SIGKILL a
second later, whatever the job was still saving. corral's ``submitit_local`` launcher runs this module
in its place (``python -m corral.launchers.submitit_controller <folder>``): submitit's own
``Controller``, with a SIGINT handler that does nothing, so the job, which got the same Ctrl-C, stops
and saves as ``train.py`` run alone does, and the controller ends with it, quietly. A Python handler,
unlike an ignored SIGINT, is not inherited by the job's processes.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Sequence


def main(argv: Sequence[str]) -> None:
    """Run submitit's controller of the job in the folder ``argv[0]``, SIGINT left to the job."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    from submitit.local.local import Controller

    Controller(Path(argv[0])).run()


if __name__ == "__main__":
    main(sys.argv[1:])
