"""Built-in composition checks, implemented through the same validation hook any plugin may use."""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject an algorithm that needs whole episodes paired with a worker that returns fragments."""
    registry = get_registry()
    worker_cls = registry.get("worker", cfg.worker.name).factory
    algo = registry.get("algo", cfg.algo.name).factory
    if getattr(worker_cls, "returns_fragments", False) and not getattr(algo, "accepts_fragments", False):
        raise ConfigError(
            f"algo={cfg.algo.name} needs whole episodes, but worker={cfg.worker.name} returns fragments; "
            "choose worker=default or worker=vec"
        )
