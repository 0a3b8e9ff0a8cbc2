"""A network's forward pass on a CUDA device for numpy callers: the action servers' policy on a GPU.

An action server calls its policy once per environment step with a small batch (tens of rows).
For networks of a few layers the GPU's arithmetic then takes microseconds, and the cost is the
host's: one kernel launch per layer and activation, the two copies, and the wait. Both classes
here keep that cost down:

- :class:`EagerDeviceForward`: pinned host buffers per batch shape (so a batch of another size,
  as when the server serves one worker and then two, never re-allocates pinned memory), the
  input copied over and the output copied back without blocking, one wait at the end.
- :class:`GraphedDeviceForward`: the same, with the network's kernels captured once per batch
  shape as a CUDA graph and replayed, one launch per call whatever the depth.

Both return what ``net(torch.from_numpy(x).to(device))`` computes eagerly (to float rounding: the
library may pick other kernels for a captured graph than for an eager call).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


def _tensor_slots(net: nn.Module) -> list[tuple[dict, str, torch.Tensor, int]]:
    """Every parameter and buffer of ``net`` as (the dict that holds it, its name, it, its storage address)."""
    slots = []
    for module in net.modules():
        for table in (module._parameters, module._buffers):
            for name, tensor in table.items():
                if tensor is not None:
                    slots.append((table, name, tensor, tensor.data_ptr()))
    return slots


@dataclass
class _Buffers:
    """One batch shape's pinned host input and output (with their numpy views, made once: this runs
    every environment step) and their device twins."""

    host_in: torch.Tensor
    device_in: torch.Tensor
    host_out: torch.Tensor
    device_out: torch.Tensor
    graph: torch.cuda.CUDAGraph | None = None

    def __post_init__(self) -> None:
        self.host_in_np = self.host_in.numpy()
        self.host_out_np = self.host_out.numpy()


class EagerDeviceForward:
    """``net``'s forward on ``device`` through pinned host buffers kept per batch shape.

    Args:
        net: the network (already on ``device``).
        device: a CUDA device.
        max_shapes: batch shapes kept at once (least recently used dropped first).
    """

    def __init__(self, net: nn.Module, device: torch.device, max_shapes: int = 8) -> None:
        self.net = net
        self.device = device
        self.max_shapes = max_shapes
        self._slots = _tensor_slots(net)
        self._shapes: OrderedDict[tuple[int, ...], _Buffers] = OrderedDict()

    def valid(self, net: nn.Module) -> bool:
        """True while ``net`` is the network this was built for, holding the same parameter and buffer
        tensors at the same storage addresses (what a captured graph reads). Checked on every call:
        a few microseconds, where ``net.parameters()`` would cost ten."""
        if net is not self.net:
            return False
        for table, name, tensor, pointer in self._slots:
            if table.get(name) is not tensor or tensor.data_ptr() != pointer:
                return False
        return True

    def _buffers(self, shape: tuple[int, ...]) -> _Buffers:
        buffers = self._shapes.get(shape)
        if buffers is None:
            buffers = self._build(shape)
            self._shapes[shape] = buffers
            while len(self._shapes) > self.max_shapes:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(shape)
        return buffers

    def _build(self, shape: tuple[int, ...]) -> _Buffers:
        host_in = torch.zeros(shape, dtype=torch.float32).pin_memory()
        device_in = torch.zeros(shape, dtype=torch.float32, device=self.device)
        with torch.no_grad():
            device_out = self.net(device_in)
        host_out = torch.empty(device_out.shape, dtype=device_out.dtype).pin_memory()
        return _Buffers(host_in, device_in, host_out, device_out)

    def _run(self, buffers: _Buffers) -> None:
        with torch.no_grad():
            buffers.device_out = self.net(buffers.device_in)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The network's output for the float32 batch ``x``, as a numpy view of a pinned buffer
        (valid until the next call with the same shape)."""
        buffers = self._buffers(tuple(x.shape))
        buffers.host_in_np[...] = x  # any layout, cast to float32
        buffers.device_in.copy_(buffers.host_in, non_blocking=True)
        self._run(buffers)
        buffers.host_out.copy_(buffers.device_out, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return buffers.host_out_np


class GraphedDeviceForward(EagerDeviceForward):
    """:class:`EagerDeviceForward` with the network's kernels captured as one CUDA graph per batch
    shape (after a warm-up on a side stream, as capture requires) and replayed on every call."""

    def _build(self, shape: tuple[int, ...]) -> _Buffers:
        buffers = super()._build(shape)
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):  # cuBLAS handles and workspaces are made here, not during capture
                self.net(buffers.device_in)
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            buffers.device_out = self.net(buffers.device_in)
        buffers.graph = graph
        return buffers

    def _run(self, buffers: _Buffers) -> None:
        assert buffers.graph is not None
        buffers.graph.replay()


__all__ = ["EagerDeviceForward", "GraphedDeviceForward"]
