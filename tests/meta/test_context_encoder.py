"""PEARL's posterior: product of Gaussian factors, the prior for empty context, the KL term."""

from __future__ import annotations

import torch

from corral.meta.context_encoder import ContextEncoder, kl_to_standard_normal, product_of_gaussians


def test_product_of_gaussians_is_the_precision_weighted_mean() -> None:
    means = torch.tensor([[[1.0, 0.0], [3.0, 2.0]]])
    variances = torch.tensor([[[1.0, 4.0], [1.0, 4.0]]])
    mean, var = product_of_gaussians(means, variances)
    assert torch.allclose(var, torch.tensor([[0.5, 2.0]]))
    assert torch.allclose(mean, torch.tensor([[2.0, 1.0]]))
    # a sharper factor pulls the mean towards itself
    mean, _ = product_of_gaussians(means, torch.tensor([[[1.0, 1.0], [0.01, 0.01]]]))
    assert (mean - torch.tensor([[3.0, 2.0]])).abs().max() < 0.05


def test_posterior_ignores_order_and_padding_and_empty_context_is_the_prior() -> None:
    torch.manual_seed(0)
    encoder = ContextEncoder(context_dim=4, latent_dim=3, hidden_sizes=[16])
    context = torch.randn(2, 5, 4)
    mean, var = encoder(context)
    shuffled = encoder(context[:, torch.randperm(5)])
    assert torch.allclose(mean, shuffled[0], atol=1e-5) and torch.allclose(var, shuffled[1], atol=1e-5)
    padded = torch.cat([context, torch.randn(2, 3, 4)], dim=1)
    valid = torch.tensor([[True] * 5 + [False] * 3] * 2)
    pm, pv = encoder(padded, valid)
    assert torch.allclose(mean, pm, atol=1e-5) and torch.allclose(var, pv, atol=1e-5)
    nothing = torch.zeros(2, 8, dtype=torch.bool)
    em, ev = encoder(padded, nothing)
    assert torch.equal(em, torch.zeros(2, 3)) and torch.equal(ev, torch.ones(2, 3))
    em, ev = encoder(torch.zeros(2, 0, 4))
    assert torch.equal(em, torch.zeros(2, 3)) and torch.equal(ev, torch.ones(2, 3))
    # more evidence, less uncertainty
    assert (encoder(context[:, :2])[1] > var).all()


def test_kl_to_standard_normal() -> None:
    assert kl_to_standard_normal(torch.zeros(4), torch.ones(4)).item() == 0.0
    assert abs(kl_to_standard_normal(torch.tensor([1.0]), torch.tensor([1.0])).item() - 0.5) < 1e-6
    assert kl_to_standard_normal(torch.zeros(2), torch.full((2,), 0.1)).item() > 0
