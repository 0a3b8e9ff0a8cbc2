"""Small torch network builders."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation(name: str) -> type[nn.Module]:
    """An activation class by name (``tanh``, ``relu``, ``elu``, ``gelu``, ``silu``)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}") from None


def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int, act: str = "tanh", out_gain: float = 1.0) -> nn.Sequential:
    """An MLP with orthogonal initialisation (gain sqrt(2) inside, ``out_gain`` on the last layer)."""
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden_sizes:
        lin = nn.Linear(last, int(h))
        nn.init.orthogonal_(lin.weight, gain=2**0.5)
        nn.init.zeros_(lin.bias)
        layers += [lin, activation(act)()]
        last = int(h)
    out = nn.Linear(last, out_dim)
    nn.init.orthogonal_(out.weight, gain=out_gain)
    nn.init.zeros_(out.bias)
    layers.append(out)
    return nn.Sequential(*layers)


def flat_dim(shape: Sequence[int] | None) -> int:
    """Number of elements of one observation or action."""
    n = 1
    for s in shape or ():
        n *= int(s)
    return n


def params_to_numpy(module: nn.Module) -> dict[str, "object"]:
    """A module's state dict as numpy copies (picklable, shippable)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def numpy_to_params(module: nn.Module, params: dict) -> None:
    """Load :func:`params_to_numpy`'s output into ``module``."""
    module.load_state_dict({k: torch.as_tensor(v) for k, v in params.items()})
