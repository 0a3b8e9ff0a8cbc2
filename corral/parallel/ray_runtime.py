"""Ray plumbing shared by the Ray sampler and the Ray launcher: joining a cluster, the
``runtime_env`` users pass on to Ray, and finding the module behind an import failure inside a Ray
worker."""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from typing import Any, Mapping

from corral.framework.errors import ConfigError, CorralError
from corral.framework.worker import missing_module_of

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
    was started of it stopped."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    notices = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if _drop_default_auth_notice not in notices.filters:
        notices.addFilter(_drop_default_auth_notice)
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


__all__ = ["RUNTIME_ENV_KEYS", "RayStartError", "check_cluster_address", "check_runtime_env", "join_cluster", "missing_module_in",
           "start_local_runtime"]
