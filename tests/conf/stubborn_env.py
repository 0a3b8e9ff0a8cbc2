"""A CartPole with a SIGTERM handler of its own, for tests/launchers/test_joblib_timeout.py: ``env=gym
env.id=stubborn_env:corral_test/StubbornCartPole-v1`` with ``tests/conf`` on ``PYTHONPATH``.

Like a simulator binding that connects when it is made and again when an episode starts, it installs its
handler when it is made and on every ``reset``, so in a job's process (``sampler=local``) it replaces the
trainer's handler from the first episode's start on:

- ``on_sigterm=ignore``: the handler says so and the environment keeps going: the job does not stop on
  SIGTERM (a launcher's past its timeout, a user's ``kill``);
- ``on_sigterm=pass_on``: the handler takes ``flush_s`` seconds (closing its simulator) and then hands the
  signal on to the handler it replaced (the trainer's): the job stops as on a user's SIGTERM, that much later;
- ``on_sigterm=default``: the handler takes ``flush_s`` seconds, then sends SIGTERM again with its default
  action: the job's process ends at once, its epoch in progress not saved.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

#: The start of the line the handler prints when SIGTERM arrives.
SAID = "stubborn_env: SIGTERM received"
#: What the handler does (``on_sigterm``), see the module docstring.
MODES = ("ignore", "pass_on", "default")


class StubbornCartPole(CartPoleEnv):
    """CartPole that installs its own SIGTERM handler when made and on ``reset`` (``on_sigterm``: one of
    :data:`MODES`; ``flush_s``: the seconds ``pass_on`` and ``default`` take)."""

    def __init__(self, on_sigterm: str = "ignore", flush_s: float = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if on_sigterm not in MODES:
            raise ValueError(f"on_sigterm must be one of {', '.join(MODES)}, got {on_sigterm!r}")
        self.on_sigterm, self.flush_s = on_sigterm, float(flush_s)
        self.replaced: Any = signal.SIG_DFL
        self.install()

    def install(self) -> None:
        """Install the handler (again: whatever replaced it since), keeping the one it replaces (in the main
        thread: the only one that can)."""
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if current != self.handle:  # a bound method: equal, not the same object
            self.replaced = current
            signal.signal(signal.SIGTERM, self.handle)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        """Install the handler, then CartPole's reset."""
        self.install()
        return super().reset(*args, **kwargs)

    def handle(self, signum: int, frame: Any) -> None:
        """SIGTERM: say so; ``ignore``: keep going; after ``flush_s`` seconds, ``pass_on``: the handler this
        one replaced; ``default``: SIGTERM's default action (the process ends)."""
        print(f"{SAID} in pid {os.getpid()}; {self.on_sigterm}", file=sys.stderr, flush=True)
        if self.on_sigterm == "ignore":
            return
        time.sleep(self.flush_s)
        if self.on_sigterm == "pass_on" and callable(self.replaced):
            self.replaced(signum, frame)
        elif self.on_sigterm == "default" or self.replaced == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


if "corral_test/StubbornCartPole-v1" not in gym.registry:
    gym.register(id="corral_test/StubbornCartPole-v1", entry_point=StubbornCartPole, max_episode_steps=500)
