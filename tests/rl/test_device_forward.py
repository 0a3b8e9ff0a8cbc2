"""corral.rl.device_forward: the forward pass on a GPU, eager and as replayed CUDA graphs (all but the
validity check need CUDA)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from corral.framework.env import EnvSpec
from corral.plugins.policies.mlp import MLPPolicy
from corral.rl.device_forward import EagerDeviceForward, GraphedDeviceForward
from corral.rl.networks import mlp

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICE = torch.device("cuda")


def reference(net: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.from_numpy(x).to(DEVICE)).cpu().numpy()


def batches(seed: int, sizes: list[int], dim: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, dim)).astype(np.float32) for n in sizes]


@needs_cuda
@pytest.mark.parametrize("kind", [EagerDeviceForward, GraphedDeviceForward])
def test_forward_equals_torch_for_every_batch_shape_in_any_order(kind: type[EagerDeviceForward]) -> None:
    net = mlp(4, [64, 64], 2, "tanh").to(DEVICE)
    forward = kind(net, DEVICE)
    for x in batches(0, [16, 32, 16, 1, 32, 7, 16]):  # shapes come back after others were used
        np.testing.assert_allclose(forward(x), reference(net, x), rtol=1e-5, atol=1e-6)


@needs_cuda
def test_a_graph_sees_in_place_parameter_updates() -> None:
    net = mlp(4, [64, 64], 2, "tanh").to(DEVICE)
    forward = GraphedDeviceForward(net, DEVICE)
    (x,) = batches(1, [16])
    before = forward(x).copy()
    other = mlp(4, [64, 64], 2, "tanh")
    net.load_state_dict(other.state_dict())  # in place: the captured graph reads the new weights
    assert forward.valid(net)
    after = forward(x)
    assert np.abs(before - after).max() > 1e-3
    np.testing.assert_allclose(after, reference(net, x), rtol=1e-5, atol=1e-6)


def test_replaced_parameters_invalidate_the_forward() -> None:
    # Only the check: no forward runs, so this needs no GPU (on a GPU the net would live there).
    net = mlp(4, [8], 2, "tanh")
    forward = GraphedDeviceForward(net, DEVICE)
    assert forward.valid(net)
    net.load_state_dict(mlp(4, [8], 2, "tanh").state_dict())  # in place: the graph reads the new values
    assert forward.valid(net)
    old = net[0].weight.data
    net[0].weight.data = old.clone()  # new storage (the old one still alive): a graph would read the old one
    assert not forward.valid(net)
    forward = GraphedDeviceForward(net, DEVICE)
    net[2].bias = torch.nn.Parameter(net[2].bias.detach().clone())  # a new Parameter object
    assert not forward.valid(net)
    assert not GraphedDeviceForward(net, DEVICE).valid(mlp(4, [8], 2, "tanh"))


@needs_cuda
def test_least_recently_used_shapes_are_dropped() -> None:
    net = mlp(4, [8], 2, "tanh").to(DEVICE)
    forward = GraphedDeviceForward(net, DEVICE, max_shapes=2)
    for x in batches(3, [1, 2, 1, 3]):
        forward(x)
    assert list(forward._shapes) == [(1, 4), (3, 4)]


@needs_cuda
def test_mlp_policy_on_cuda_gives_the_cpu_policys_actions_and_pickles() -> None:
    import gymnasium as gym

    spec = EnvSpec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)))
    cpu = MLPPolicy(spec)
    cpu.deterministic = True
    gpu = copy.deepcopy(cpu).to(DEVICE)
    for x in batches(4, [16, 32, 16]):
        got, _ = gpu.get_actions(x)
        want, _ = cpu.get_actions(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert gpu._device_forward is not None
    restored = pickle.loads(pickle.dumps(gpu))  # the graphs and pinned buffers are never pickled
    assert restored._device_forward is None
    np.testing.assert_allclose(restored.get_actions(x)[0], gpu.get_actions(x)[0], rtol=1e-5, atol=1e-6)
