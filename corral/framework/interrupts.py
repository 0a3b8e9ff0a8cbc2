"""Ctrl-C and SIGTERM while training: when a signal interrupts, and when it waits.

The trainer (:mod:`corral.framework.trainer`) runs its loop inside :func:`catch_stop_signals`, so
``kill`` or a scheduler's preemption takes Ctrl-C's path, and a Ctrl-C whose KeyboardInterrupt an
environment or a library swallowed (a bare ``except:``) still stops the run at the next epoch
boundary (:meth:`StopRequest.check`); it commits each epoch inside
:func:`defer_interrupts`, so an epoch's state is updated wholly or not at all; and while finished
epochs are not in a snapshot yet it runs the epoch inside :func:`finish_epoch_on_interrupt`, so a
first signal lets the epoch finish and be saved. Outside the main thread each of them does nothing
(signal handlers can only be installed there).

One stop, sent twice, counts once: a scheduler that stops a job sends SIGTERM to every process of it
(``kill -TERM -<pgid>``, systemd's control group), and a launcher that passes a SIGTERM to its sweep
on to the jobs (``hydra/launcher=joblib``) sends each job one more. So a SIGTERM that arrives within
:data:`SAME_SIGTERM_WINDOW_S` seconds of the SIGTERM these handlers last acted on is dropped
(:func:`repeated_sigterm`): it is the same request, and does not count as the "second signal" that
stops at once. A SIGTERM sent again later does; Ctrl-C (SIGINT) is never dropped. So every notice that
says how to stop at once says so (:func:`send_again`: ``send SIGTERM again (more than 1.5 s later)``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from corral.framework.errors import raised_within

#: Seconds after a SIGTERM that these handlers acted on within which another SIGTERM is the same request
#: sent twice (a scheduler's to every process, and a launcher's passed on), and is dropped.
SAME_SIGTERM_WINDOW_S = 1.5

_sigterm_taken_at: list[float] = []  # when the handlers here last acted on a SIGTERM (monotonic; none yet)


def repeated_sigterm(signum: int) -> bool:
    """True when ``signum`` is a SIGTERM that arrived within :data:`SAME_SIGTERM_WINDOW_S` seconds of the
    SIGTERM the handlers of this module last acted on: the same stop, sent twice, to be dropped. Else
    False, and a SIGTERM is recorded as acted on now. Called once for each signal a handler here gets."""
    if signum != signal.SIGTERM:
        return False
    now = time.monotonic()
    if _sigterm_taken_at and now - _sigterm_taken_at[0] < SAME_SIGTERM_WINDOW_S:
        return True
    _sigterm_taken_at[:] = [now]
    return False


def _dropping_repeats(take: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    """The signal handler to install for ``take``: it drops a repeated SIGTERM (:func:`repeated_sigterm`)
    and hands every other signal to ``take``, which it keeps as its ``take`` attribute, for a block that
    held a signal back and hands it on when it ends (that signal was counted when it arrived)."""

    def handler(signum: int, frame: Any) -> None:
        if not repeated_sigterm(signum):
            take(signum, frame)

    handler.take = take  # type: ignore[attr-defined]
    return handler


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a cluster scheduler's preemption) arrived while training."""


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """The exception a signal stops training with: :class:`Terminated` for SIGTERM, else KeyboardInterrupt."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@dataclass
class StopRequest:
    """The first Ctrl-C or SIGTERM a block recorded (None: none yet): the signal that asked training
    to stop after the current epoch (:func:`finish_epoch_on_interrupt`), or one whose exception the
    code under :func:`catch_stop_signals` caught on its way up (an environment's or a library's bare
    ``except:``); :meth:`check` raises it again where the caller can act on it."""

    signum: Optional[int] = None

    def check(self) -> None:
        """Raise the interrupt of a signal that arrived (KeyboardInterrupt, or :class:`Terminated`)."""
        if self.signum is not None:
            raise interrupt_for(self.signum)


@contextlib.contextmanager
def catch_stop_signals() -> Iterator[StopRequest]:
    """Within the block, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt), so ``kill`` or a
    scheduler's preemption takes Ctrl-C's path (snapshot, sampler shut down, a clear line), and
    Ctrl-C raises KeyboardInterrupt as before (through the handler that was installed). Either
    signal is also recorded in the :class:`StopRequest` the block gets, so a stop the code under it
    swallowed is not lost. A repeated SIGTERM (:func:`repeated_sigterm`) is dropped. A SIGINT the
    process ignores stays ignored."""
    latch = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield latch
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        latch.signum = latch.signum or signum
        raise Terminated()

    outer_sigint = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        latch.signum = latch.signum or signum
        if callable(outer_sigint):
            outer_sigint(signum, frame)  # Python's default raises KeyboardInterrupt
        else:
            raise KeyboardInterrupt

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _dropping_repeats(on_sigterm))}
    if callable(outer_sigint) or outer_sigint == signal.SIG_DFL:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _dropping_repeats(on_sigint))
    try:
        yield latch
    finally:
        for sig, old in previous.items():
            if old is not None:
                signal.signal(sig, old)


@contextlib.contextmanager
def finish_epoch_on_interrupt(notice: Callable[[int], str]) -> Iterator[StopRequest]:
    """Within the block, a first Ctrl-C or SIGTERM is only recorded (``notice(signum)`` is printed)
    so the epoch can finish and be saved; a second one interrupts at once, unless it is the first
    SIGTERM again within :data:`SAME_SIGTERM_WINDOW_S` seconds (:func:`repeated_sigterm`: a scheduler's
    and a launcher's copy of one stop), which is dropped. A signal the process ignores stays ignored."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def held(signum: int) -> bool:
        """Record a first signal and print the notice (True); False when one was recorded already."""
        if request.signum is not None:
            return False
        request.signum = signum
        print(notice(signum), file=sys.stderr, flush=True)
        return True

    def take(signum: int, frame: Any) -> None:
        if not held(signum):
            raise interrupt_for(signum)

    handler = _dropping_repeats(take)
    # defer_interrupts, inside this block, hands a first signal here at once (the notice is not
    # held back until the update ends) and keeps only a second one.
    handler.held = held  # type: ignore[attr-defined]
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, old in previous.items():
        if old != signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield request
    finally:
        for sig, old in previous.items():
            if old is not None and signal.getsignal(sig) is handler:
                signal.signal(sig, old)


#: Seconds a signal is held before :func:`defer_interrupts` says so (a short hold says nothing).
HOLD_NOTICE_AFTER_S = 1.0


@contextlib.contextmanager
def defer_interrupts(notice: Callable[[int], str] | None = None, *, second_stops: bool = False) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, so state updates are never half done; the
    first signal that arrived is then handled as it would have been. A signal the process ignores
    stays ignored.

    ``notice(signum)`` is printed when a held signal is still held :data:`HOLD_NOTICE_AFTER_S`
    later, so a long update does not look like an ignored Ctrl-C. With ``second_stops`` a second
    signal interrupts at once (for a block whose half-done work is dropped anyway); a repeated SIGTERM
    (:func:`repeated_sigterm`) is dropped, never a second signal. Inside
    :func:`finish_epoch_on_interrupt` a first signal is that block's request, recorded (and its
    notice printed) at once.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[Any] = []
    timer: list[threading.Timer] = []
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def take(signum: int, frame: Any) -> None:
        held_outside = getattr(previous[signum], "held", None)  # finish_epoch_on_interrupt's request
        if held_outside is not None and held_outside(signum):
            return
        if second_stops and (received or held_outside is not None):
            raise interrupt_for(signum)
        received.append((signum, frame))
        if len(received) == 1 and notice is not None and held_outside is None:
            text = notice(signum)
            timer.append(threading.Timer(HOLD_NOTICE_AFTER_S, lambda: print(text, file=sys.stderr, flush=True)))
            timer[0].daemon = True
            timer[0].start()

    handler = _dropping_repeats(take)
    for sig, old in previous.items():
        if old != signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for t in timer:
            t.cancel()
        for sig, old in previous.items():
            if old is not None and signal.getsignal(sig) is handler:
                signal.signal(sig, old)
        if received:
            signum, frame = received[0]
            old = previous[signum]
            if callable(old):
                getattr(old, "take", old)(signum, frame)  # counted when it arrived: not a repeat of itself
            elif old == signal.SIG_DFL and signum == signal.SIGTERM:
                raise Terminated()
            elif old != signal.SIG_IGN:
                raise KeyboardInterrupt


@contextlib.contextmanager
def hold_while_stopping(notice: Callable[[int], str]) -> Iterator[None]:
    """For the cleanup of a run that is already stopping (an interrupt or an error on its way up):
    a further Ctrl-C or SIGTERM prints ``notice(signum)`` and is dropped, so the workers are still
    shut down and the run's record written (a second Ctrl-C pressed right after the first used to
    cut that short, leaving Ray's processes behind); one more after that interrupts the cleanup. A
    repeated SIGTERM (:func:`repeated_sigterm`) is dropped without a notice. A signal the process
    ignores stays ignored."""
    with finish_epoch_on_interrupt(notice):  # the same rule: the first is recorded and said, a second raises
        yield


def signal_label(signum: int) -> str:
    """How the notices name a stop signal: ``SIGTERM``, or ``Ctrl-C`` for SIGINT."""
    return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def send_again(signum: int) -> str:
    """What a notice tells the user to do to act on ``signum`` at once: press Ctrl-C again, or send SIGTERM
    again more than :data:`SAME_SIGTERM_WINDOW_S` seconds later (a repeat within it is taken as the same
    SIGTERM and dropped, :func:`repeated_sigterm`)."""
    if signum == signal.SIGTERM:
        return f"send SIGTERM again (more than {SAME_SIGTERM_WINDOW_S:g} s later)"
    return "press Ctrl-C again"


def stopping_notice(signum: int) -> str:
    """What a signal during a stopping run's cleanup says (see :func:`hold_while_stopping`)."""
    return (f"corral: {signal_label(signum)}: already stopping, and finishing that first (workers shut down, files "
            f"written; a few seconds); {send_again(signum)} to leave at once")


__all__ = ["HOLD_NOTICE_AFTER_S", "SAME_SIGTERM_WINDOW_S", "StopRequest", "Terminated", "catch_stop_signals",
           "defer_interrupts", "finish_epoch_on_interrupt", "hold_while_stopping", "interrupt_for",
           "repeated_sigterm", "send_again", "signal_label", "stopping_notice"]


def _handler_codes() -> set[Any]:
    """The code objects of the Python functions installed as signal handlers now (a bound method's
    function's, a :func:`functools.partial`'s function's)."""
    codes: set[Any] = set()
    for sig in signal.valid_signals():
        try:
            handler: Any = signal.getsignal(sig)
        except (ValueError, OSError):  # a signal this platform lists but cannot report
            continue
        while hasattr(handler, "func"):  # functools.partial
            handler = handler.func
        handler = getattr(handler, "__func__", handler)  # a bound method
        code = getattr(handler, "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


def raised_by_signal_handler(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a Python signal handler installed now ran (its frame is on
    ``exc``'s traceback): the handler's way to end the process (submitit's requeue on SIGUSR2 raises
    SystemExit), which must pass, unlike a ``sys.exit()`` in an environment's own code."""
    return raised_within(exc, _handler_codes())
