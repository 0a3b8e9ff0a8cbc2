"""Row-by-row products and the batch-invariant forward pass that samplers rely on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from corral.rl.networks import batch_invariant_forward, mlp, rowwise_linear


@pytest.mark.parametrize(("k", "out"), [(4, 64), (64, 2), (300, 300), (512, 512), (17, 6)])
def test_a_rows_product_does_not_depend_on_its_batch(k: int, out: int) -> None:
    """Bit-identical rows whatever the batch size, the row's position and the buffer's alignment."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((out, k)).astype(np.float32)
    x = rng.standard_normal((70, k)).astype(np.float32)
    full = rowwise_linear(x, weight)
    np.testing.assert_allclose(full, x.astype(np.float64) @ weight.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    for start, n in [(0, 1), (5, 1), (3, 16), (31, 32), (69, 1)]:
        rows = x[start : start + n]
        misaligned = np.empty(rows.size + 1, dtype=np.float32)[1:].reshape(rows.shape)
        misaligned[...] = rows
        for part in (rows.copy(), misaligned):
            np.testing.assert_array_equal(rowwise_linear(part, weight), full[start : start + n])


def test_batch_invariant_forward_matches_torch_and_is_batch_invariant() -> None:
    """Close to torch's own forward pass; each row the same alone as in the batch."""
    torch.manual_seed(0)
    net = mlp(8, [512, 512], 3, "tanh")
    x = np.random.default_rng(1).standard_normal((33, 8)).astype(np.float32)
    got = batch_invariant_forward(net, x)
    with torch.no_grad():
        np.testing.assert_allclose(got, net(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    for i in (0, 16, 32):
        np.testing.assert_array_equal(batch_invariant_forward(net, x[i : i + 1]), got[i : i + 1])
