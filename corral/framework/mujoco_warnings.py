"""MuJoCo's warnings as corral's log records, instead of MuJoCo's default handler.

MuJoCo's C library reports a warning by printing ``WARNING: <message>`` and a blank line to stderr
and appending it to ``MUJOCO_LOG.TXT`` in the working directory. With MuJoCo 4, every model of
gymnasium's MuJoCo environments warns that its ``settotalmass`` attribute is deprecated: eight lines
at the start of each run, and a file left in the directory the user ran from, for an asset the user
did not write.

In every process that makes a MuJoCo environment (:func:`corral.framework.env.before_making`
imports the environment's module, then calls :func:`route_mujoco_warnings`), corral routes MuJoCo's
warnings to the ``corral.env`` logger instead, each message once per process: a deprecation at debug
level, any other warning (an unstable simulation: ``Nan, Inf or huge value in QACC``) as one
``corral: warning: MuJoCo: ...`` line, which also reaches the run's ``corral.log``. Nothing is
written to the working directory. A VectorEnv that EnvPool makes steps its own copy of MuJoCo,
which this does not reach.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("corral.env")

#: The messages this process has logged (MuJoCo may repeat one every step).
_seen: set[str] = set()


def on_mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler: log ``message`` once per process (debug for a deprecation)."""
    message = message.strip()
    if message in _seen:
        return
    _seen.add(message)
    if "deprecated" in message:
        log.debug("MuJoCo: %s", message)
    else:
        log.warning("MuJoCo: %s", message)


def route_mujoco_warnings() -> bool:
    """Install :func:`on_mujoco_warning` as MuJoCo's warning handler in this process when MuJoCo is
    imported (call it after importing an environment's module, before its model is compiled).
    Returns whether it is installed; it never imports MuJoCo itself."""
    mujoco: Any = sys.modules.get("mujoco")
    setter = getattr(mujoco, "set_mju_user_warning", None)
    if setter is None:
        return False
    if getattr(mujoco, "get_mju_user_warning", lambda: None)() is not on_mujoco_warning:
        setter(on_mujoco_warning)
    return True


__all__ = ["on_mujoco_warning", "route_mujoco_warnings"]
