"""Shared building blocks used by plugins: networks, noise streams, returns, episode buffers."""
