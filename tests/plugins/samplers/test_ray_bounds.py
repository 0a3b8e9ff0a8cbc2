"""RaySampler's waits are bounded as the other samplers' are, and its actors say what worker processes say.

- ``state_dict`` / ``load_state_dict`` are bounded per worker by its progress, as sampling is (the
  whole call used to be bounded by ``timeout``): a stuck actor is named with its pid and terminated.
- ``ray.shutdown()`` of the runtime the sampler started is bounded: a Ray that stops answering has
  its processes killed instead, with a warning, and the process still exits.
- NaN from an environment names the worker, as under the other samplers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from corral import DefaultWorker, EnvFactory, EnvironmentValueError, EnvSpec, MLPPolicy, RaySampler  # noqa: E402
from corral.framework.errors import WorkerError  # noqa: E402
from corral.testing.processes import wait_gone  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


class SlowStateWorker(DefaultWorker):
    """A DefaultWorker whose worker ``hang_worker`` hangs ``hang_s`` seconds in ``hang_in``
    (``"state_dict"`` or ``"load_state_dict"``)."""

    def __init__(self, *, hang_in: str = "state_dict", hang_worker: int = 1, hang_s: float = 60.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang_in, self.hang_worker, self.hang_s = hang_in, hang_worker, hang_s

    def _maybe_hang(self, method: str) -> None:
        if method == self.hang_in and self.worker_number == self.hang_worker:
            time.sleep(self.hang_s)

    def state_dict(self) -> dict[str, Any]:
        self._maybe_hang("state_dict")
        return super().state_dict()

    def load_state_dict(self, state: Any) -> None:
        self._maybe_hang("load_state_dict")
        super().load_state_dict(state)


# The actors unpickle SlowStateWorker by value: this test module is not importable where they run.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def policy():
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))


@pytest.mark.parametrize("method", ["state_dict", "load_state_dict"])
def test_a_stuck_state_call_is_named_per_worker_and_terminated(ray_runtime, policy, method: str) -> None:
    """The words and semantics of a stuck sampling call (it was ``worker(s) [1] did not answer within 3 s``,
    and the stuck actor was left running)."""
    activity = {"state_dict": "saving its sampling state (state_dict)",
                "load_state_dict": "restoring its sampling state (load_state_dict)"}[method]
    with RaySampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=100, n_workers=2, seed=1,
                    timeout=3, num_cpus=0.5, worker_class=SlowStateWorker,
                    worker_args={"hang_in": method}) as sampler:
        sampler.obtain_samples(0, 100, policy.get_param_values())
        state = sampler.state_dict() if method == "load_state_dict" else None
        pid = sampler.locations[1][0]
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            if state is None:
                sampler.state_dict()
            else:
                sampler.load_state_dict(state)
        assert time.monotonic() - t0 < 20
        assert not wait_gone([pid], timeout=10), "the stuck actor was not terminated"
    assert info.value.worker_number == 1
    assert str(info.value) == (f"ray sampler: worker 1 (pid {pid}) made no progress for 3 s while {activity} and was "
                               "terminated; raise sampler.timeout if its rollouts are this slow"), str(info.value)


def test_nan_from_an_environment_names_the_worker(ray_runtime, policy) -> None:
    env = EnvFactory("corral.testing.faulty_envs:corral/NaNCartPole-v1", {"fail_at": 30, "only_worker": 1})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=30,
                    num_cpus=0.5) as sampler:
        with pytest.raises(EnvironmentValueError) as info:
            sampler.obtain_samples(0, 200, policy.get_param_values())
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"worker 1's environment {env!r} returned values no algorithm can learn from "
                              "(observations: NaN in "), message
    assert "while sampling (obtain_samples); the run stopped before training on them" in message, message


SHUTDOWN_SCRIPT = textwrap.dedent("""
    import json, logging, os, time
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import ray
    from corral import EnvFactory, EnvSpec, MLPPolicy, RaySampler
    from corral.framework.env import silence_gymnasium_deprecations

    silence_gymnasium_deprecations()  # as train.py's process: any note printed would be the actor's

    env = EnvFactory("CartPole-v0")  # an old id: gymnasium's deprecation note, which no actor may print
    policy = MLPPolicy(EnvSpec.from_env(env()), hidden_sizes=(8,))
    RaySampler.shutdown_timeout_s = 3.0
    sampler = RaySampler(agents=policy, envs=env, max_episode_length=100, n_workers=1, seed=1)
    sampler.obtain_samples(0, 100, policy.get_param_values())
    time.sleep(1.0)  # the actor's output reaches this process
    node = ray._private.worker._global_node
    pids = [info.process.pid for infos in node.all_processes.values() for info in infos]
    pids += [pid for pid, _ in sampler.locations]
    print("PIDS " + json.dumps(pids), flush=True)
    real_shutdown = ray.shutdown

    def alive(pid):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"

    def hung_shutdown(*args, **kwargs):  # a Ray that stopped answering: it waits until its processes are gone
        while any(alive(pid) for pid in pids):
            time.sleep(0.1)
        real_shutdown(*args, **kwargs)

    ray.shutdown = hung_shutdown
    t0 = time.monotonic()
    sampler.shutdown_worker()
    print(f"SHUTDOWN_S {time.monotonic() - t0:.1f}", flush=True)
""")


def test_a_ray_shutdown_that_hangs_is_bounded_and_leaves_no_process(tmp_path: Path) -> None:
    """In a process of its own (its Ray runtime is killed, not shut down). Its actor, under a driver that
    shows the actors' output, also prints no ``CartPole-v0 is out of date`` note."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-c", SHUTDOWN_SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    pids = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("PIDS "))[5:])
    assert len(pids) >= 3, pids  # GCS, raylet... and the actor
    assert not wait_gone(pids, timeout=15), f"left running: {wait_gone(pids, timeout=0)}"
    seconds = float(next(line for line in proc.stdout.splitlines() if line.startswith("SHUTDOWN_S "))[11:])
    assert seconds < 3.0 + 15, out[-3000:]
    assert "ray sampler: Ray's shutdown did not finish within 3 s; its processes were killed instead" in proc.stderr, \
        out[-3000:]
    assert "out of date" not in out and "DeprecationWarning" not in out, out[-3000:]
