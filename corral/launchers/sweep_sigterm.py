"""SIGTERM to a sweep's own process, as Ctrl-C: the launcher stops its jobs and the sweep ends with its line.

``kill <pid>``, systemd or a supervisor sends SIGTERM to the sweep's process alone. With Python's
default it died at once, silently, and its jobs trained on, orphaned (``submitit_local``); under
Ray, Ray's own handler ended it with a stack dump. While a launcher waits for its jobs it installs
:class:`SweepSigterm`: SIGTERM raises :class:`~corral.framework.interrupts.Terminated` (a
KeyboardInterrupt), so the launcher's Ctrl-C path runs (the jobs stopped and given time to save,
their processes ended), and :attr:`SweepSigterm.received` tells the launcher it was SIGTERM, which
reached none of its jobs, so it passes the stop on. (``hydra/launcher=joblib`` runs its loop under
the trainer's own :func:`~corral.framework.interrupts.catch_stop_signals` instead.) Outside a launcher's wait
(while Hydra composes the sweep, between a sweeper's batches), ``train.py``'s
:func:`~corral.framework.sweep_jobs.following` takes SIGTERM as Ctrl-C the same way, for the whole command.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from corral.framework.interrupts import Terminated


class SweepSigterm:
    """Between :meth:`start` and :meth:`stop` (or as a ``with`` block), SIGTERM raises
    :class:`~corral.framework.interrupts.Terminated` in this process and sets :attr:`received`.

    ``held=True``: until :meth:`arm`, a SIGTERM is only recorded, so nothing it interrupts is left
    half done (jobs half submitted); :meth:`arm` raises it then. ``enabled=False``: nothing changes.
    The handler before is put back (one Python cannot put back, such as Ray's native handler, becomes
    the default). A SIGTERM the process ignores stays ignored; outside the main thread nothing changes.
    """

    def __init__(self, *, enabled: bool = True, held: bool = False) -> None:
        #: Whether a SIGTERM arrived.
        self.received = False
        self.enabled = enabled
        self._armed = not held
        self._previous: Any = None
        self._installed = False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.received = True
        if self._armed:
            raise Terminated()

    def arm(self) -> None:
        """From now on SIGTERM raises at once; one that came before (while held) raises now."""
        self._armed = True
        if self.received and self._installed:
            raise Terminated()

    def start(self) -> None:
        """Install the handler."""
        if not self.enabled or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.getsignal(signal.SIGTERM)  # None: a native handler (Ray's)
        if self._previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True

    def stop(self) -> None:
        """Put the handler before :meth:`start` back (idempotent)."""
        if self._installed and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
        self._installed = False

    def __enter__(self) -> "SweepSigterm":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["SweepSigterm"]
