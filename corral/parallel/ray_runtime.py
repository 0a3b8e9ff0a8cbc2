"""Ray plumbing shared by the Ray sampler and the Ray launcher: the ``runtime_env`` users pass on to
Ray, and finding the module behind an import failure inside a Ray worker."""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from corral.framework.errors import ConfigError
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


def missing_module_in(exc: BaseException) -> str | None:
    """The module a Ray error says could not be imported (unpickling an argument, say), if any."""
    for candidate in (getattr(exc, "cause", None), exc):
        if isinstance(candidate, BaseException):
            found = missing_module_of(candidate)
            if found:
                return found
    match = _NO_MODULE.search(str(exc))
    return match.group(1) if match else None


__all__ = ["RUNTIME_ENV_KEYS", "check_runtime_env", "missing_module_in"]
