"""PEARL's context encoder: a posterior over the latent task variable ``z`` from transitions.

Each context transition ``c_n = (observation, action in [-1, 1], reward)`` is mapped by an MLP to
a Gaussian factor ``N(mu_n, sigma_n^2)`` over ``z``; the posterior given ``N`` transitions is the
normalised product of those factors (Rakelly et al. 2019, eq. 2):

    sigma^2 = 1 / sum_n (1 / sigma_n^2),    mu = sigma^2 * sum_n (mu_n / sigma_n^2).

With no context the posterior is the prior ``N(0, I)``. The product is permutation invariant, so
the order in which transitions were collected does not matter.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from corral.rl.networks import mlp

#: Lower bound of a factor's variance (keeps 1 / sigma_n^2 finite).
MIN_VARIANCE = 1e-7


def product_of_gaussians(means: torch.Tensor, variances: torch.Tensor, valid: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mean and variance ``[..., L]`` of the factors ``[..., N, L]``.

    ``valid`` (``[..., N]`` bools) leaves out padded transitions; a row with none left gets the
    prior ``N(0, I)``.
    """
    precision = 1.0 / variances.clamp_min(MIN_VARIANCE)
    weighted = means * precision
    if valid is not None:
        w = valid.to(precision.dtype).unsqueeze(-1)
        precision, weighted = precision * w, weighted * w
    total = precision.sum(dim=-2)
    empty = total <= 0
    variance = torch.where(empty, torch.ones_like(total), 1.0 / total.clamp_min(MIN_VARIANCE))
    mean = torch.where(empty, torch.zeros_like(total), weighted.sum(dim=-2) * variance)
    return mean, variance


def kl_to_standard_normal(mean: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
    """``KL(N(mean, variance) || N(0, I))`` summed over the last dimension."""
    return 0.5 * (variance + mean.pow(2) - 1.0 - variance.clamp_min(MIN_VARIANCE).log()).sum(-1)


class ContextEncoder(nn.Module):
    """``[..., N, context_dim]`` transitions -> per-transition Gaussian factors -> posterior over ``z``."""

    def __init__(self, context_dim: int, latent_dim: int, hidden_sizes: Sequence[int], activation: str = "relu"
                 ) -> None:
        super().__init__()
        self.context_dim = int(context_dim)
        self.latent_dim = int(latent_dim)
        self.net = mlp(self.context_dim, list(hidden_sizes), 2 * self.latent_dim, activation, out_gain=1.0)

    def factors(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance ``[..., N, L]`` of each transition's factor."""
        out = self.net(context.float())
        return out[..., : self.latent_dim], F.softplus(out[..., self.latent_dim :])

    def forward(self, context: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and variance ``[..., L]`` given the transitions ``[..., N, context_dim]``."""
        if context.shape[-2] == 0:
            shape = (*context.shape[:-2], self.latent_dim)
            return torch.zeros(shape), torch.ones(shape)
        return product_of_gaussians(*self.factors(context), valid)


__all__ = ["MIN_VARIANCE", "ContextEncoder", "kl_to_standard_normal", "product_of_gaussians"]
