"""Small torch network builders."""

from __future__ import annotations

from typing import Sequence

import numpy as np
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


def params_to_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    """A module's state dict as numpy copies (picklable, shippable)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def numpy_to_params(module: nn.Module, params: dict) -> None:
    """Load :func:`params_to_numpy`'s output into ``module``."""
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})


def _np_elu(h: np.ndarray, m: nn.Module) -> np.ndarray:
    return np.where(h > 0, h, np.asarray(m.alpha, dtype=h.dtype) * np.expm1(np.minimum(h, 0)))


_NUMPY_ACTIVATIONS = {
    nn.Tanh: lambda h, m: np.tanh(h),
    nn.ReLU: lambda h, m: np.maximum(h, 0),
    nn.ELU: _np_elu,
    nn.SiLU: lambda h, m: h / (1 + np.exp(-h)),
}


def rowwise_linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``x @ weight.T`` computed one row at a time, so that a row's result never depends on the others.

    ``x`` is ``[n, k]``, ``weight`` is a Linear layer's ``[out, k]``. A stacked ``matmul`` of
    ``[n, 1, k]`` by ``[k, out]`` makes one BLAS call per row, always of the same shape: the same
    kernel and summation order whatever ``n`` is or where the row sits in the batch (a whole-batch
    product lets BLAS pick kernels by batch size). About 3x faster than a fixed-order ``einsum``.
    """
    return np.matmul(x[:, None, :], weight.T)[:, 0, :]


def batch_invariant_forward(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    """Forward pass of an :func:`mlp` in numpy whose every row is independent of the other rows.

    BLAS matrix products (what ``net(x)`` runs) pick kernels and summation orders by batch size,
    so an observation's output changes in the last bits with the batch it is in, and a chaotic
    environment turns that into different episodes. Here each row is multiplied on its own
    (:func:`rowwise_linear`), so a slot's actions are the same whether it is stepped alone, in a
    vectorised worker or in an action server's batch.
    """
    h = np.ascontiguousarray(x, dtype=np.float32)
    for layer in net:
        if isinstance(layer, nn.Linear):
            w = layer.weight.detach().numpy()
            h = rowwise_linear(h, w)
            if layer.bias is not None:
                h += layer.bias.detach().numpy()
        else:
            fn = _NUMPY_ACTIVATIONS.get(type(layer))
            if fn is not None:
                h = fn(h, layer)
            else:  # elementwise torch op (e.g. GELU) on a zero-copy view
                with torch.inference_mode():
                    h = layer(torch.from_numpy(h)).numpy()
    return h
