"""Ray plumbing shared by the Ray sampler and the Ray launcher: joining a cluster, starting and
stopping a local runtime (its processes killed when Ray's own shutdown does not return, or when
Ctrl-C stops ``ray.init`` halfway), the ``runtime_env`` users pass on to Ray, and finding the
module behind an import failure inside a Ray worker."""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import socket
import threading
import warnings
from contextlib import contextmanager
from typing import Any, Collection, Iterator, Mapping

from corral.framework.errors import ConfigError, CorralError
from corral.framework.worker import missing_module_of
from corral.parallel.process_tree import kill_processes, process_tree

#: runtime_env keys corral passes on to Ray (see Ray's "Runtime environments" documentation).
RUNTIME_ENV_KEYS = ("working_dir", "py_modules", "pip", "uv", "conda", "env_vars", "excludes", "config")


def check_runtime_env(runtime_env: Mapping[str, Any] | None, where: str = "sampler.runtime_env") -> dict[str, Any]:
    """``runtime_env`` as a plain dict Ray accepts, local paths made absolute; a ConfigError names
    an unknown key or a path that does not exist."""
    if not runtime_env:
        return {}
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(runtime_env, (DictConfig, ListConfig)):
            runtime_env = OmegaConf.to_container(runtime_env, resolve=True)  # type: ignore[assignment]
    except ImportError:  # pragma: no cover - omegaconf comes with hydra
        pass
    if not isinstance(runtime_env, Mapping):
        raise ConfigError(f"{where} must be a mapping of Ray runtime_env keys, got {type(runtime_env).__name__}")
    out = {str(k): v for k, v in runtime_env.items() if v not in (None, "", [], {})}
    unknown = sorted(set(out) - set(RUNTIME_ENV_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {unknown}; Ray's runtime_env takes {list(RUNTIME_ENV_KEYS)}")

    def local(path: Any, key: str) -> Any:
        text = str(path)
        if "://" in text:  # a remote URI (s3://, gs://, https://): Ray fetches it
            return text
        full = os.path.abspath(os.path.expanduser(text))
        if not os.path.exists(full):
            raise ConfigError(f"{where}.{key}: {text!r} does not exist (resolved to {full})")
        return full

    if "working_dir" in out:
        out["working_dir"] = local(out["working_dir"], "working_dir")
    if "py_modules" in out:
        modules = out["py_modules"]
        if isinstance(modules, (str, os.PathLike)):
            modules = [modules]
        out["py_modules"] = [local(m, "py_modules") for m in modules]
    if "env_vars" in out:
        out["env_vars"] = {str(k): str(v) for k, v in dict(out["env_vars"]).items()}
    return out


log = logging.getLogger(__name__)

_NO_MODULE = re.compile(r"No module named '([^']+)'")


def join_cluster(ray: Any, address: str, option: str, **init_args: Any) -> None:
    """``ray.init(address=address, **init_args)``, or one :class:`ConfigError` naming ``option`` (the
    setting that gave the address, e.g. ``sampler.address``) and what to do when no cluster answers
    there or Ray cannot read the address (see :func:`check_cluster_address`)."""
    check_cluster_address(address, option)
    try:
        with warnings.catch_warnings():  # the ray:// client's own timeout warning: said in the error
            warnings.filterwarnings("ignore", category=UserWarning, module=r"ray\.util\.client")
            ray.init(address=address, **init_args)
    except (ConnectionError, ValueError) as exc:  # no cluster there, or an address Ray cannot read
        raise _join_error(address, option, exc) from None


def check_cluster_address(address: str, option: str) -> None:
    """Raise one :class:`ConfigError` naming ``option`` when nothing answers at the Ray cluster
    address ``address`` (``host:port``, or what ``auto`` resolves to: RAY_ADDRESS or the cluster
    this machine last started) or Ray cannot read it. It takes seconds; Ray itself would retry its
    connection for minutes (twenty tries of about half a minute each). A ``ray://`` client address
    is left to Ray's client, which gives up within a minute."""
    try:
        _check_reachable(address)
    except (ConnectionError, ValueError) as exc:
        raise _join_error(address, option, exc) from None


def _join_error(address: str, option: str, exc: BaseException) -> ConfigError:
    reason = str(exc).strip().split(". ")[0].rstrip(".")
    return ConfigError(
        f"could not join a Ray cluster at {option}={address} ({reason}): start one with `ray start --head` "
        "and give its address (host:port, ray://host:10001, or auto on one of its nodes), or leave "
        f"{option} empty for a Ray runtime of this run's own")


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise ConnectionError (ValueError) when nothing answers at ``address`` (Ray cannot read it)."""
    if address.startswith("ray://"):
        return
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray's layout: ray.init finds out on its own
        return
    resolved = canonicalize_bootstrap_address(address)  # ConnectionError/ValueError: none, or unreadable
    if not resolved:
        return
    host, _, port = resolved.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {resolved}: {exc.strerror or exc}") from None


def missing_module_in(exc: BaseException) -> str | None:
    """The module a Ray error says could not be imported (unpickling an argument, say), if any."""
    for candidate in (getattr(exc, "cause", None), exc):
        if isinstance(candidate, BaseException):
            found = missing_module_of(candidate)
            if found:
                return found
    match = _NO_MODULE.search(str(exc))
    return match.group(1) if match else None


#: Ray's notice, on starting a local runtime, that it turned on its default token authentication:
#: nothing for the user to do (the warning that it is off stays).
_DEFAULT_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def _drop_default_auth_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_DEFAULT_AUTH_NOTICE)


class RayStartError(CorralError):
    """A local Ray runtime could not start (its processes did not come up: a full disk under Ray's
    temporary directory, a full ``/dev/shm``, a port taken)."""


def start_local_runtime(ray: Any, part: str = "ray", **init_args: Any) -> None:
    """``ray.init(address="local", **init_args)``: a fresh runtime of this process's own (never an
    existing ``ray start`` cluster or ``RAY_ADDRESS``), without Ray's usage-stats prompt or its
    notice that token authentication is on (Ray's default; every run printed it). A runtime that
    does not start is one :class:`RayStartError` line naming ``part`` (``ray sampler``), with what
    was started of it stopped. Ctrl-C while it starts (a KeyboardInterrupt, or any other
    BaseException) stops every process this call started, within seconds, and is raised unchanged:
    Ray's shutdown may not know of a node whose start was cut short, and the agents its raylet
    started would outlive this process by a minute."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    notices = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if _drop_default_auth_notice not in notices.filters:
        notices.addFilter(_drop_default_auth_notice)
    before = process_tree([os.getpid()])
    try:
        ray.init(address="local", **init_args)
    except Exception as exc:  # noqa: BLE001 - Ray raises plain Exception for a node that did not come up
        try:
            ray.shutdown()  # the processes that did start
        except Exception:  # noqa: BLE001 - best effort
            pass
        why = (str(exc).strip().splitlines() or [""])[0]
        raise RayStartError(f"{part}: could not start a local Ray runtime ({type(exc).__name__}: {why}); Ray's logs "
                            "say why (under its temporary directory, /tmp/ray/session_latest/logs by default): a "
                            "full disk there or a full /dev/shm stops it") from None
    except BaseException:  # Ctrl-C (or SystemExit) while Ray was starting: nothing of it may outlive this process
        _stop_interrupted_start(ray, before, part)
        raise


#: Seconds the ``ray.shutdown()`` of a start cut short by Ctrl-C may take before what started is killed.
_INTERRUPTED_SHUTDOWN_S = 3.0
#: Seconds the processes of a start cut short by Ctrl-C have to exit after SIGTERM before SIGKILL.
_INTERRUPTED_GRACE_S = 2.0


def _stop_interrupted_start(ray: Any, before: Collection[int], part: str) -> None:
    """Stop what a ``ray.init`` cut short started: a bounded ``ray.shutdown()``, then every process
    descending from this one that was not there before (``before``), the whole tree collected first,
    SIGTERM, then SIGKILL. Bounded (about 10 s at most); a second Ctrl-C does not cut it short."""
    with _sigint_ignored():
        try:
            _, thread = shutdown_within(ray, _INTERRUPTED_SHUTDOWN_S)
            started = process_tree([os.getpid()]) - set(before) - {os.getpid()}
            left = kill_processes(started, _INTERRUPTED_GRACE_S)
            if thread.is_alive():
                let_shutdown_finish(ray, thread, _INTERRUPTED_GRACE_S)  # its processes are gone: it returns
            if left:
                log.warning("%s: %d process(es) of the interrupted Ray start did not exit: %s", part, len(left),
                            sorted(left))
        except Exception as exc:  # noqa: BLE001 - best effort; the interrupt is what the user must see
            log.debug("%s: stopping an interrupted Ray start raised %s: %s", part, type(exc).__name__, exc)


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored inside the block when this is the main thread (elsewhere Python delivers none)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)


def shutdown_within(ray: Any, timeout_s: float) -> tuple[bool, threading.Thread]:
    """Run ``ray.shutdown()`` in a daemon thread and wait up to ``timeout_s`` seconds for it: (True
    when it returned without raising, the thread). A thread still alive is a shutdown that hangs
    (see :func:`let_shutdown_finish`); a thread that ended with False raised."""
    done = threading.Event()

    def shutdown() -> None:
        try:
            ray.shutdown()
        except Exception as exc:  # noqa: BLE001 - the caller kills the runtime's processes instead
            log.debug("ray.shutdown() raised %s: %s", type(exc).__name__, exc)
        else:
            done.set()

    thread = threading.Thread(target=shutdown, name="corral-ray-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return done.is_set(), thread


def let_shutdown_finish(ray: Any, thread: threading.Thread, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` seconds for a ``ray.shutdown()`` thread (:func:`shutdown_within`)
    whose runtime's processes were killed; when it still runs, Ray's own exit hook is taken off, as
    it would call the same shutdown again and the interpreter would hang at exit."""
    thread.join(timeout_s)
    if thread.is_alive():
        hook = getattr(getattr(getattr(ray, "_private", None), "worker", None), "shutdown", None)
        if hook is not None:
            atexit.unregister(hook)


__all__ = ["RUNTIME_ENV_KEYS", "RayStartError", "check_cluster_address", "check_runtime_env", "join_cluster",
           "let_shutdown_finish", "missing_module_in", "shutdown_within", "start_local_runtime"]
