"""Reporting: the markdown table of one environment, the speed targets met, and where one step of 32
environments goes."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from .harness import Result, Target
from .processes import machine_info
from .samplers import corral_key


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}x" if x and y and np.isfinite(x) and np.isfinite(y) else ""


TABLE_HEADER = ("| method | N | steps/s | ± | vs local (same worker) | vs SyncVectorEnv (same N) | vs raw random loop "
                "| steps/CPU-s | CPU: vs SyncVectorEnv | CPU: vs raw random |")


def table(results: list[Result]) -> str:
    """The markdown table of one environment."""
    raw = next((r for r in results if r.spec.kind == "raw_random" and not r.error), None)
    sync = {r.spec.n: r for r in results if r.spec.kind == "gym_sync" and not r.error}
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = [TABLE_HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.spec.method} | {r.spec.n} | failed: {r.error} | | | | | | | |")
            continue
        base = sync.get(r.spec.compare_n) if r.spec.compare_n is not None else None
        local = by_key.get(r.spec.vs_local) if r.spec.vs_local else None
        cpu = f"{r.cpu_median:,.0f}" + (" †" if r.multi_process else "") if r.cpu_median else "n/a"
        lines.append(
            f"| {r.spec.method} | {r.spec.n} | {r.median:,.0f} | {r.spread} "
            f"| {_ratio(r.median, local.median if local else None)} "
            f"| {_ratio(r.median, base.median if base else None)} | {_ratio(r.median, raw.median if raw else None)} "
            f"| {cpu} | {_ratio(r.cpu_median, base.cpu_median if base else None)} "
            f"| {_ratio(r.cpu_median, raw.cpu_median if raw else None)} |"
        )
    return "\n".join(lines)


def targets_table(env_id: str, results: list[Result], targets: list[Target]) -> str:
    """Which speed targets of ``env_id`` this run meets (empty when none applies)."""
    by_key = {r.spec.key: r for r in results if not r.error}
    lines = []
    for t in targets:
        if t.env_id != env_id:
            continue
        row, base = by_key.get(t.row), by_key.get(t.base)
        if row is None or base is None:
            lines.append(f"| {t.label} | >= {t.minimum:g}x | not measured | | |")
            continue
        ratio = row.median / base.median
        # the two rows measured in the same round (a few seconds apart), round by round
        rounds = [a / b for a, b in zip(row.rates, base.rates)]
        spread = f"{min(rounds):.2f}x to {max(rounds):.2f}x" if len(rounds) > 1 else ""
        lines.append(f"| {t.label} | >= {t.minimum:g}x | {ratio:.2f}x ({row.median:,.0f} / {base.median:,.0f} "
                     f"steps/s) | {spread} | {'yes' if ratio >= t.minimum else '**no**'} |")
    if not lines:
        return ""
    return "\n".join(["| speed target | required | measured (ratio of medians) | same-round ratios | met |",
                      "|---|---:|---:|---:|---|", *lines])


def step_parts_table(results: list[Result], n: int = 32, sync_target: float = 1.3) -> str:
    """Where the time of one step of ``n`` environments goes, and what that allows.

    Every in-process row's steps/s becomes microseconds per step of all ``n`` environments. E (the
    ``env.step`` calls) and P (one ``get_actions`` call) are measured alone; the floor,
    SyncVectorEnv(n) and corral's ``local + vec(n)`` make the same calls plus their own machinery
    (their time - E - P). A loop that makes these calls takes at least E + P, so its ratio to
    SyncVectorEnv(n) is at most S / (E + P) however little else it does: the lines under the
    table compare that with ``sync_target`` (issue 2's target). Empty when a needed row is missing.
    """
    found: dict[str, Result] = {}
    for r in results:
        if not r.error and r.spec.n == n and r.median > 0:
            found.setdefault(r.spec.kind, r)
    corral = next((r for r in results if not r.error and r.spec.key == corral_key("local", "vec", n)), None)
    if corral is not None and corral.median > 0:
        found["corral_vec"] = corral
    if any(kind not in found for kind in ("gym_sync", "env_steps", "policy_only")):
        return ""

    def us(kind: str) -> float:
        return n / found[kind].median * 1e6

    e, p, s = us("env_steps"), us("policy_only"), us("gym_sync")
    labels = [("env_steps", "E: env.step calls"), ("env_unwrapped", "E_u: env.unwrapped.step calls"),
              ("policy_only", f"P: one policy.get_actions call (batch {n})"), ("floor", "floor: minimal loop"),
              ("gym_sync", f"gym SyncVectorEnv({n}) + policy"), ("corral_vec", f"corral local + vec({n})")]
    lines = [f"| part or row | µs per step of {n} environments | beyond E + P (µs) |", "|---|---:|---:|"]
    for kind, label in labels:
        if kind in found:
            beyond = f"{us(kind) - e - p:+.1f}" if kind in ("floor", "gym_sync", "corral_vec") else ""
            lines.append(f"| {label} | {us(kind):.1f} | {beyond} |")
    lines += [
        "",
        f"- {sync_target:g}x SyncVectorEnv({n}) leaves {s / sync_target:.1f} µs per step of {n} environments; "
        f"E + P alone take {e + p:.1f} µs.",
        f"- So a loop that calls these environments' `step` and this policy once per step reaches at most "
        f"S / (E + P) = {s / (e + p):.2f}x SyncVectorEnv({n}), whatever else it leaves out.",
    ]
    if "env_unwrapped" in found:
        eu = us("env_unwrapped")
        lines.append(f"- Calling `env.unwrapped.step` (no TimeLimit, OrderEnforcing or PassiveEnvChecker) would "
                     f"raise that bound to S / (E_u + P) = {s / (eu + p):.2f}x.")
    if "corral_vec" in found:
        lines.append(f"- corral local + vec({n}): {s / us('corral_vec'):.2f}x SyncVectorEnv({n}), "
                     f"{(e + p) / us('corral_vec'):.2f}x the bound's E + P.")
    return "\n".join(lines)


def profile_document(title: str, method: str, header: str, rows: list[str], versions: str = "") -> str:
    """A profile script's markdown: title, the command that ran (this process's argv), date and machine
    (``versions`` appended, e.g. EnvPool's), how it measured, and its table."""
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    return "\n".join([f"# {title}", "", f"Command: `{command}`", "",
                      f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_info()}{versions}", "",
                      method, "", header, *rows, ""])


def emit(text: str, out: Path | None) -> None:
    """Print ``text``; with ``out``, also write it there."""
    print(text)
    if out is not None:
        out.write_text(text)
        print(f"wrote {out}")
