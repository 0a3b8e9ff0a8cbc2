"""A sweep job whose process died: what every corral launcher says and records for it.

A job's process can end before the job returns: the out-of-memory killer's SIGKILL, a crash in
native code, an ``os._exit()``, a launcher's own kill past its timeout, a worker a cluster lost.
The job never got to print its line or write its ``summary.json``, so the launcher does it for the
job, from the sweep's process, the same way whichever launcher ran it:

- one ``[job N] corral: error: <how the process ended>; <what to do>`` line (``trainer.resume=<job
  dir>`` when the job saved a snapshot, else run it again) - :func:`death_reason`;
- a ``summary.json`` in the job's directory with ``status: failed`` and that reason
  (:func:`write_failed_summary`), so ``corral results`` lists it as failed;
- a failed ``JobReturn`` whose error is a :class:`~corral.framework.entry.SweepJobFailed`
  (:func:`failed_return`), so the sweep goes on with its other jobs and ends with corral's one line
  and exit status 1, as for a job that failed with a corral error.

Each launcher only finds out how the process ended (an exit code, a pid, a scheduler's word) and
calls :func:`died`. A job the launcher itself killed because it had not stopped within its grace after the
sweep was stopped (Ctrl-C, or SIGTERM passed on to it) is said and recorded the same way by :func:`killed`:
its line names the job, its directory and what its latest snapshot holds, and its ``summary.json`` says
``status: killed`` (not ``failed``: the sweep was stopped, the job did not fail), with the epochs that
snapshot holds; the sweep still ends with its interrupted line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

#: Signals that mean a crash in native code (an environment's or a library's), not a kill from outside.
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE")


class JobProcessDied(RuntimeError):
    """A job whose process ended before the job returned: killed by a signal, ended by ``os._exit()``,
    killed by the launcher past its timeout, or lost by the cluster. Its message is the job's one line."""


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal 64`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def how_it_ended(code: int | None, pid: int | str | None, *, timeout: float | None = None,
                 timeout_key: str = "hydra.launcher.timeout", fewer: str = "run fewer jobs at once",
                 unknown: str = "", stopped: bool = False, grace: float | None = None) -> str:
    """How a job's process ended, in words: from its exit ``code`` (negative: the signal that killed
    it; None: not known) after the launcher sent it SIGTERM past ``timeout`` seconds (``timeout_key``;
    with ``stopped``: the job stopped on it and its trainer saved the run as on a user's SIGTERM; with
    ``grace``: the job was still running ``grace`` seconds after it, and the launcher killed it), else
    from its exit ``code`` alone. ``fewer`` is the launcher's advice against running out of memory;
    ``unknown``, what the launcher knows when the code is not known (such as a scheduler's job state)."""
    who = f"the job's process (pid {pid if pid is not None else '?'})"
    if timeout is not None and stopped:
        return (f"the job ran past {timeout_key}={timeout:g} s, so {who} was sent SIGTERM and the job stopped as "
                "on a user's SIGTERM (summary.json: interrupted)")
    if timeout is not None and grace is not None:
        return (f"the job ran past {timeout_key}={timeout:g} s and did not stop within {grace:g} s of SIGTERM, so "
                f"{who} was killed with SIGKILL (code in the job handles SIGTERM without stopping, such as an "
                "environment's own SIGTERM handler, or a call in it does not return)")
    if timeout is not None:  # it ended between the launcher's SIGTERM and its kill
        ended = (f"was killed by {signal_name(-code)}" if code is not None and code < 0 else
                 f"exited with code {code}" if code is not None else "ended")
        return (f"the job ran past {timeout_key}={timeout:g} s, so {who} was sent SIGTERM, and it {ended} instead "
                "of stopping as the trainer does on SIGTERM (code in the job set SIGTERM back to its default action, "
                "or ended its process)")
    if code is not None and code < 0:
        name = signal_name(-code)
        how = f"{who} was killed by {name} while the job ran"
        if name == "SIGKILL":
            how += (", as the out-of-memory killer does when the machine runs out of memory (`dmesg` says whether "
                    f"it did): {fewer} or give them less to hold")
        elif name in CRASH_SIGNALS:
            how += " (a crash in native code: an environment's or a library's)"
        return how
    if code is not None:
        return (f"{who} exited with code {code} while the job ran (code that ends its process at once: os._exit() "
                "or a library's exit)")
    return f"{who} ended while the job ran{f' ({unknown})' if unknown else ''}"


def death_reason(how: str, run_dir: Path) -> str:
    """The job's line: ``how`` its process ended, and what to do (resume from its snapshot in
    ``run_dir``, or run it again)."""
    try:
        from corral.framework.trainer import find_snapshot

        snapshot = find_snapshot(run_dir)
    except Exception:  # noqa: BLE001 - no snapshot (or none readable): the job starts again
        return f"{how}; it saved no snapshot, so run it again with its overrides"
    from corral.framework.shell_words import shell_override

    return f"{how}; {shell_override('trainer.resume', run_dir)} continues it from its latest snapshot ({snapshot.name})"


class JobKilled(RuntimeError):
    """A job the launcher killed (SIGKILL) because it did not stop within the grace it had after the sweep was
    stopped (Ctrl-C, or SIGTERM passed on to it). Its message is the job's one line."""


def saved_epochs(run_dir: Path) -> tuple[int, str] | None:
    """How many epochs the latest snapshot in ``run_dir`` holds, and its file name (``epoch_000004.pt``: 4
    epochs, 0-3); None when the run saved none."""
    try:
        from corral.framework.trainer import find_snapshot

        snapshot = find_snapshot(run_dir)
        return int(snapshot.stem.rsplit("_", 1)[1]), snapshot.name
    except Exception:  # noqa: BLE001 - no snapshot (or none readable, or not named by its epoch)
        return None


def killed(cfg: Any, *, overrides: Sequence[str], started: float, pid: int | str | None, stop: str,
           grace: float, cut_short: bool = False) -> BaseException:
    """The launcher killed a job that had not stopped after the sweep was stopped (``stop``: by what, in words:
    ``the sweep's SIGTERM``, which the launcher passed on to the job, or ``the sweep's Ctrl-C``, which reached
    it from the terminal): print the job's ``[job N] corral: error:`` line,
    naming the job, its directory and what its snapshots hold (``trainer.resume=<job dir>`` continues it, or,
    with none, that it saved none), and write its ``summary.json`` with ``status: killed``, that line and the
    epochs its latest snapshot holds (a ``summary.json`` its process wrote itself stays). ``grace``: the seconds
    it had; ``cut_short``: a further signal to the sweep ended the grace early. Returns the error (the sweep
    ends with its interrupted line, not with this)."""
    from corral.framework.logger import job_prefix
    from corral.framework.shell_words import shell_override

    num = cfg.hydra.job.num
    with job_hydra_config(cfg) as run_dir:
        if pid is None:
            pid = lock_pid(run_dir)
        within = ("before a second signal to the sweep stopped it at once" if cut_short else
                  f"within {grace:g} s of {stop}")
        how = (f"job {num} ({' '.join(overrides) or 'no overrides'}, in {run_dir}) did not stop {within}, so its "
               f"process (pid {pid if pid is not None else '?'}) was killed with SIGKILL")
        saved = saved_epochs(run_dir)
        if saved is None:
            then = "it saved no snapshot, so run it again with its overrides"
        else:
            then = (f"its latest snapshot ({saved[1]}) holds epochs 0-{saved[0] - 1}: "
                    f"{shell_override('trainer.resume', run_dir)} continues it")
        error = JobKilled(f"{how}; {then}")
        print(f"{job_prefix()}corral: error: {error}", file=sys.stderr, flush=True)
        try:
            write_failed_summary(run_dir, cfg, num=int(num), overrides=overrides, started=started,
                                 pid=pid if isinstance(pid, int) else None, error=error, status="killed",
                                 epochs=saved[0] if saved is not None else None)
        except Exception as exc:  # noqa: BLE001 - the line is said; the summary is one more record
            print(f"{job_prefix()}corral: warning: could not write {run_dir / 'summary.json'} ({exc}); `corral "
                  "results` will list the job as unfinished", file=sys.stderr, flush=True)
        return error


def job_config(hydra_context: Any, config: Any, overrides: Sequence[str], num: int) -> Any:
    """The job's composed config as Hydra's ``execute_job`` sets it in the job's own process (its
    ``hydra.job.id`` and ``hydra.job.num``), for a job whose process could not return it."""
    from omegaconf import open_dict

    cfg = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.id = f"{cfg.hydra.job.name}_{num}"
        cfg.hydra.job.num = num
    return cfg


@contextlib.contextmanager
def job_hydra_config(cfg: Any) -> Iterator[Path]:
    """Hydra's config is the job's ``cfg`` inside the block, with its output directory (what the block
    gets) as Hydra's ``run_job`` sets it in the job's own process; the sweep's again after."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    instance = HydraConfig.instance()
    previous = instance.cfg
    try:
        instance.set_config(cfg)
        run_dir = Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)).absolute()
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = str(run_dir)
        instance.set_config(cfg)
        yield run_dir
    finally:
        instance.cfg = previous


def lock_pid(run_dir: Path) -> int | None:
    """The pid the job's process wrote in its run directory's lock file while it trained (None when
    it wrote none): the pid of a process the launcher did not start itself."""
    from corral.framework.run_lock import LOCK_FILE

    try:
        return int((run_dir / LOCK_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def died(cfg: Any, *, overrides: Sequence[str], started: float, code: int | None = None,
         pid: int | str | None = None, timeout: float | None = None, stopped: bool = False,
         grace: float | None = None, **how: str) -> BaseException:
    """A job's process died: print the job's ``[job N] corral: error:`` line (how its process ended,
    see :func:`how_it_ended` for ``code``, ``pid``, ``timeout``, ``stopped``, ``grace`` and ``how``, and
    what to do), write its ``summary.json`` (``status: failed``; the one a process ``pid`` wrote itself, such
    as a ``stopped`` job's ``interrupted`` one, stays) and return the error the sweep ends with
    (:class:`~corral.framework.entry.SweepJobFailed`, as for a job that failed with a corral error).
    ``cfg`` is the job's composed config (:func:`job_config`); ``pid`` None: the one in its lock file."""
    from corral.framework.entry import SweepJobFailed
    from corral.framework.logger import job_prefix

    with job_hydra_config(cfg) as run_dir:
        if pid is None:
            pid = lock_pid(run_dir)
        how_ended = how_it_ended(code, pid, timeout=timeout, stopped=stopped, grace=grace, **how)
        error = JobProcessDied(death_reason(how_ended, run_dir))
        print(f"{job_prefix()}corral: error: {error}", file=sys.stderr, flush=True)
        try:
            write_failed_summary(run_dir, cfg, num=int(cfg.hydra.job.num), overrides=overrides, started=started,
                                 pid=pid if isinstance(pid, int) else None, error=error)
        except Exception as exc:  # noqa: BLE001 - the error line is said; the summary is one more record
            print(f"{job_prefix()}corral: warning: could not write {run_dir / 'summary.json'} ({exc}); `corral "
                  "results` will list the job as unfinished", file=sys.stderr, flush=True)
        return SweepJobFailed.of(error)


def failed_return(cfg: Any, overrides: Sequence[str], error: BaseException) -> Any:
    """The failed ``JobReturn`` of a job whose process died, with ``error`` (from :func:`died`) as
    the error the sweep reports."""
    from hydra.core.utils import JobReturn, JobStatus

    return JobReturn(overrides=list(overrides), cfg=cfg, hydra_cfg=cfg, status=JobStatus.FAILED,
                     _return_value=error)


def write_failed_summary(run_dir: Path, cfg: Any, *, num: int, overrides: Sequence[str], started: float,
                         pid: int | None, error: BaseException, status: str = "failed",
                         epochs: int | None = None) -> None:
    """The ``summary.json`` of a job whose process died (it could not write one): ``status: failed`` (or
    ``status``: ``killed`` for a job the launcher killed, :func:`killed`) and why, with the job's overrides,
    number and config, and ``epochs`` when known (the epochs its latest snapshot holds, also as
    ``last_saved_epoch``). A summary the process (``pid``) wrote itself before it ended stays as it is; one
    from an earlier session of a run resumed in place is kept, marked failed (or ``status``)."""
    from omegaconf import OmegaConf, open_dict

    from corral.results.summary import SUMMARY_FILE, write_summary

    try:
        existing = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        existing = None
    if not isinstance(existing, dict):
        existing = None
    elif pid is not None and existing.get("pid") == pid:
        return  # the job's own record: its process wrote it, then ended
    now = time.time()

    def utc(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    summary: dict[str, Any] = existing or {
        "final_eval_return": None, "best_eval_return": None, "best_snapshot": None, "final_train_return": None,
        "env_steps": None, "epochs": None, "train_time_s": None, "started_at": started, "started_utc": utc(started),
        "wall_time_s": now - started, "overrides": list(overrides),
        "job": {"name": cfg.hydra.job.name, "num": num, "id": cfg.hydra.job.id, "mode": "MULTIRUN"},
    }
    summary.update({"status": status, "error": f"{type(error).__name__}: {error}", "stop_reason": None,
                    "finished_at": now, "finished_utc": utc(now), "host": socket.gethostname(), "pid": pid})
    if epochs is not None:
        summary.update(epochs=epochs, last_saved_epoch=epochs - 1)
    if existing is None:
        try:
            task: Any = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
            with open_dict(task):
                del task["hydra"]
            summary["config"] = OmegaConf.to_container(task, resolve=True)
        except Exception:  # noqa: BLE001 - a value only the job's process can resolve: no config recorded
            pass
    write_summary(run_dir, summary)


__all__ = ["CRASH_SIGNALS", "JobKilled", "JobProcessDied", "death_reason", "died", "failed_return", "how_it_ended",
           "job_config", "job_hydra_config", "killed", "lock_pid", "saved_epochs", "signal_name",
           "write_failed_summary"]
