"""The action servers' own counters: the cost of one synchronised step and of the forward pass."""

from __future__ import annotations

from .harness import Result


def server_step_table(results: list[Result]) -> str:
    """The action servers' cost of one synchronised step, from their own counters over the whole
    measurement (warm-up included): per worker request, the time the server spends collecting the
    posted observations, batching them, writing the actions back and releasing the worker, with the
    policy's forward pass excluded; and the forward pass itself."""
    lines = []
    for r in results:
        st = r.server_stats
        if r.error or not st or not st["steps"]:
            continue
        overhead = (st["serve_s"] - st["forward_s"]) / st["requests"] * 1e6
        lines.append(f"| {r.spec.method} | {st['steps']:,} | {st['requests'] / st['steps']:.2f} | {overhead:.1f} "
                     f"| {st['forward_s'] / st['steps'] * 1e6:.1f} |")
    if not lines:
        return ""
    return "\n".join(["| row | batched forward passes | workers per pass | server step cost per worker, forward "
                      "excluded (µs) | forward pass (µs) |", "|---|---:|---:|---:|---:|", *lines])
