"""Suite-wide settings."""

from __future__ import annotations

import torch

# Tiny networks are fastest single-threaded, and on a 2-core machine extra intra-op threads spin
# against the other processes a test starts (the trainer does the same; see trainer.torch_threads).
torch.set_num_threads(1)
