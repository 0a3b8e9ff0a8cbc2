"""Sampling throughput: corral's samplers and workers against raw gymnasium loops and vector envs.

The package behind ``experiments/bench_sampling.py`` (its one entry point, same flags and output):

- :mod:`.settings`: constants every part shares; :mod:`.processes`: CPU time from /proc, leftovers,
  the Ray runtime, the machine;
- :mod:`.harness`: the shared harness (runner protocol, context, timed loops, row and target specs,
  round-robin measurement); :mod:`.report`: the tables;
- one module per family of rows: :mod:`.loops` (raw loops and floors, gymnasium's vector envs),
  :mod:`.samplers` (corral's samplers and the fixed cost of a call), :mod:`.server` (the action
  servers' own counters), :mod:`.vector` (``worker=vector`` beside its bare loop);
  ``experiments/bench_gpu.py`` runs the action-server rows on a GPU;
- :mod:`.rows`: the rows and speed targets measured by default; :mod:`.cli`: flags and the run.

    python experiments/bench_sampling.py                      # CartPole-v1, the CPU-heavy CartPole (and
                                                              # HalfCheetah-v5 where MuJoCo is installed)
    python experiments/bench_sampling.py --envs CartPole-v1 --budget 3 --repeats 5
    python experiments/bench_sampling.py --quick              # small budget (CI smoke test)
    python experiments/bench_sampling.py --quick --no-ray     # ... without Ray (no Ray runtime started)
    python experiments/bench_sampling.py --rows ray local/vec # only rows whose key contains one of these

Every row steps the same environment with the same stochastic MLP policy (corral's ``MLPPolicy``,
64x64, tanh) and reports environment steps per second:

- ``raw random``: a plain gymnasium loop with ``env.action_space.sample()`` (the ceiling);
- ``raw policy``: the same loop with one policy call per step (batch of 1);
- ``gym SyncVectorEnv``: gymnasium's vector env with N copies and one batched
  ``policy.get_actions`` call per step; autoreset as gymnasium 1.x does it (``NEXT_STEP``: the
  step after an episode ends only resets that slot, so it is not counted as a step);
- ``floor``: a hand-written loop over 32 environments that only calls the policy once per step and
  each environment's ``step`` (and ``reset``), recording nothing: close to the ceiling of any
  in-process vectorised loop with this policy, SyncVectorEnv's and corral's ``vec`` worker's alike;
- ``part``: the floor's two parts measured alone: the 32 environments' ``env.step`` calls with
  actions drawn in advance (and the same through ``env.unwrapped``, gymnasium's wrappers skipped),
  and one ``policy.get_actions`` call on 32 observations. A table under each environment's
  (:func:`step_parts_table`) turns them into microseconds per step of 32 environments and shows
  what they leave for any loop's own machinery, against issue 2's 1.3x SyncVectorEnv(32);
- ``gym AsyncVectorEnv``: the same loop over gymnasium's process-parallel vector env. ``P procs x
  M envs`` is an ``AsyncVectorEnv`` over ``P`` sub-environments that are each a ``SyncVectorEnv`` of
  ``M`` (the outer env's autoreset is disabled; each inner ``SyncVectorEnv`` autoresets its own
  slots), so ``P`` processes step ``M`` environments each, and the main process makes one batched
  policy call for all ``P * M`` per step; ``N procs`` is the plain one-environment-per-process form;
- ``corral <sampler> + <worker>``: whole ``sampler.obtain_samples(itr, batch, params)`` calls with
  ``params = policy.get_param_values()`` (the agent update a trainer sends every epoch), timed whole;
- ``corral <sampler> + vector(<backend>, N)`` (issue 20, where the backend has the environment):
  ``worker=vector`` with ``batch / 32`` steps per environment per call, beside ``floor: bare loop over
  the VectorEnv``: the same VectorEnv (made by the worker's own ``build_vector_env``) and policy, one
  ``get_actions`` and one ``step`` call per step, nothing kept. A table compares each with its floor
  and gives the share of the VectorEnv's steps a call returned (whole episodes leave slots idle
  while the last episodes finish).

Every row is built (processes spawned, the Ray actors placed) and warmed up before any is
measured, so start-up never counts. Rows are measured round-robin (repeat 1 of every row, then
repeat 2, ...) so that load from other processes spreads over all rows; each measurement gets the
same time budget (a row that works in whole calls finishes the call it is in) and the table
reports the median over repeats. Ratios are taken between medians of the same run. A second
table reports the fixed cost of one ``obtain_samples`` call per sampler (see
:func:`measure_call_cost`), and a third checks the parallel samplers' speed targets
(:func:`default_targets`). The Ray rows are measured last: every other row (and per-call cost) is
measured with no Ray runtime running, whose own processes take CPU that a user of the other
samplers never pays; then one Ray runtime (``ray.init(address="local", num_cpus=2)``) is started
for every Ray row of the run (round-robin among themselves) and shut down at the end. The script
then checks that no process and no shared-memory segment of its own is left.
"""

from __future__ import annotations

from .cli import (
    NOTES,
    main,
    parse_args,
)
from .harness import (
    BenchContext,
    Result,
    RowSpec,
    Runner,
    Target,
    measure,
    select,
)
from .loops import (
    BareVectorRunner,
    EnvStepsRunner,
    GymAsyncVectorRunner,
    GymSyncVectorRunner,
    MinimalLoopRunner,
    PolicyOnlyRunner,
    RawPolicyRunner,
    RawRandomRunner,
)
from .processes import (
    leftovers,
    machine_info,
    start_ray,
)
from .report import (
    TABLE_HEADER,
    step_parts_table,
    table,
    targets_table,
)
from .rows import (
    HEAVY_ROW_KEYS,
    default_rows,
    default_targets,
    gym_async_row,
    heavy_label,
)
from .samplers import (
    CallCost,
    CallCostSpec,
    CorralRunner,
    build_sampler,
    call_cost_specs,
    call_cost_table,
    corral_key,
    corral_row,
    env_recipe_id,
    measure_call_cost,
)
from .server import (
    server_step_table,
)
from .settings import (
    ASYNC_CONTEXT,
    CALL_COST_ENV,
    CPU_HEAVY_ID,
    DEFAULT_ENVS,
    DEFAULT_OUT,
    ENVPOOL_ENVS,
    ENVPOOL_INSTALLED,
    HALF_CHEETAH_ID,
    HALF_CHEETAH_POOL_N,
    HEAVY_HIDDEN,
    MUJOCO_INSTALLED,
    NATIVE_ENVS,
    RAY_ACTOR_CPUS,
    RAY_NUM_CPUS,
    ROOT,
    SERVER_DEVICE,
    VECTOR_ENVPOOL_N,
    VECTOR_NATIVE_N,
)
from .vector import (
    bare_vector_row,
    rows_for,
    vector_batch,
    vector_floor_table,
    vector_key,
    vector_row,
    vector_rows,
    vector_targets,
)

__all__ = ['ASYNC_CONTEXT', 'CALL_COST_ENV', 'CPU_HEAVY_ID', 'DEFAULT_ENVS', 'DEFAULT_OUT', 'ENVPOOL_ENVS', 'ENVPOOL_INSTALLED', 'HALF_CHEETAH_ID', 'HALF_CHEETAH_POOL_N', 'HEAVY_HIDDEN', 'MUJOCO_INSTALLED', 'NATIVE_ENVS', 'RAY_ACTOR_CPUS', 'RAY_NUM_CPUS', 'ROOT', 'SERVER_DEVICE', 'VECTOR_ENVPOOL_N', 'VECTOR_NATIVE_N', 'leftovers', 'machine_info', 'start_ray', 'BenchContext', 'Result', 'RowSpec', 'Runner', 'Target', 'measure', 'select', 'BareVectorRunner', 'EnvStepsRunner', 'GymAsyncVectorRunner', 'GymSyncVectorRunner', 'MinimalLoopRunner', 'PolicyOnlyRunner', 'RawPolicyRunner', 'RawRandomRunner', 'CallCost', 'CallCostSpec', 'CorralRunner', 'build_sampler', 'call_cost_specs', 'call_cost_table', 'corral_key', 'corral_row', 'env_recipe_id', 'measure_call_cost', 'server_step_table', 'bare_vector_row', 'rows_for', 'vector_batch', 'vector_floor_table', 'vector_key', 'vector_row', 'vector_rows', 'vector_targets', 'HEAVY_ROW_KEYS', 'default_rows', 'default_targets', 'gym_async_row', 'heavy_label', 'TABLE_HEADER', 'step_parts_table', 'table', 'targets_table', 'NOTES', 'main', 'parse_args']
