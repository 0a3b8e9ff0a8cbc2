"""RL building blocks that algorithms and policies are made of.

Who uses it: algorithm and policy plugins (built-in and third-party). It holds:

- ``returns``: discounted returns and GAE over an ``EpisodeBatch``;
- ``on_policy`` / ``off_policy``: the shared bodies of on-policy (VPG, PPO, TRPO, RL2-PPO) and
  off-policy (SAC, DQN) algorithms;
- ``replay_buffer`` / ``episode_buffer``: the replay ring and the per-worker step log;
- ``networks``: MLP construction and initialisation helpers;
- ``noise``: independent, seedable noise streams.

Imports only ``corral.framework``.
"""

from corral.rl.replay_buffer import ReplayBuffer

__all__ = ["ReplayBuffer"]
