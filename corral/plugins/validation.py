"""Built-in composition checks, implemented through the same validation hook any plugin may use.

A registered factory may carry ``component_class`` (the class it builds) whose class attributes
declare what fits: an algorithm's ``accepts_fragments``, ``workers`` (the worker options it runs
with, named when its worker returns fragments), ``policies`` (policy options it trains),
``action_spaces`` (``"discrete"``/``"continuous"``) and ``presets`` (``experiment=`` options that set
every part for it, named in these errors); a policy's ``algorithms`` (the algorithms it is made for,
checked only when the algorithm does not list its own ``policies``).
"""

from __future__ import annotations

from typing import Any

from corral import hookimpl
from corral.framework.errors import ConfigError
from corral.framework.plugins import get_registry


def component_class(factory: Any) -> Any:
    """The class a registered factory builds (the factory itself when it says nothing)."""
    return getattr(factory, "component_class", factory)


def _action_space_kind(cfg: Any) -> str | None:
    """``"discrete"`` or ``"continuous"`` for the chosen environment (None if it cannot be built here)."""
    import gymnasium as gym

    from corral.framework.compose import env_source
    from corral.framework.env import make_env

    try:
        env = make_env(env_source(cfg.env))
    except Exception:
        return None
    try:
        space = env.action_space
    finally:
        env.close()
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box):
        return "continuous"
    return None


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject an algorithm that needs whole episodes paired with a worker that returns fragments,
    a policy the algorithm cannot train, and an action space the algorithm does not support."""
    registry = get_registry()
    worker_cls = registry.get("worker", cfg.worker.name).factory
    algo = component_class(registry.get("algo", cfg.algo.name).factory)
    if getattr(worker_cls, "returns_fragments", False) and not getattr(algo, "accepts_fragments", False):
        raise ConfigError(
            f"algo={cfg.algo.name} needs whole episodes, but worker={cfg.worker.name} returns fragments; "
            f"choose {' or '.join(f'worker={w}' for w in getattr(algo, 'workers', ()) or ('default', 'vec'))}"
        )
    presets = tuple(getattr(algo, "presets", ()) or ())
    preset = (f" (a preset sets every part: {' or '.join(f'experiment={p}' for p in presets)})" if presets else "")
    # The environment first: it is what the user came to train on, and the policy follows from both.
    spaces = tuple(getattr(algo, "action_spaces", ()) or ())
    if spaces and set(spaces) != {"discrete", "continuous"}:
        kind = _action_space_kind(cfg)
        if kind is not None and kind not in spaces:
            hint = ("algo=sac policy=tanh_gaussian" if kind == "continuous" else "algo=dqn policy=qnet")
            raise ConfigError(
                f"algo={cfg.algo.name} supports {' and '.join(spaces)} actions only, but env={cfg.env.name} has "
                f"{kind} actions; choose an environment with {' or '.join(spaces)} actions{preset}, or {hint} for "
                "this one"
            )
    policy = component_class(registry.get("policy", cfg.policy.name).factory)
    wanted = tuple(getattr(algo, "policies", ()) or ())
    if wanted and cfg.policy.name not in wanted:
        raise ConfigError(
            f"algo={cfg.algo.name} cannot train policy={cfg.policy.name}; choose "
            + " or ".join(f"policy={p}" for p in wanted) + preset
        )
    for_algos = tuple(getattr(policy, "algorithms", ()) or ())
    if not wanted and for_algos and cfg.algo.name not in for_algos:  # an algorithm's own list wins
        raise ConfigError(
            f"policy={cfg.policy.name} is made for " + " or ".join(f"algo={a}" for a in for_algos)
            + f", not algo={cfg.algo.name}; choose one of those algorithms or another policy (e.g. policy=mlp)"
        )
