"""Process and IPC machinery that the parallel samplers are built on.

Who uses it: the ``multiprocessing``, ``action_server``, ``alternating`` and ``ray`` samplers, the Ray launcher
(and a third-party sampler that wants the same parts). It holds:

- ``worker_process``: the long-lived worker process, its command loop and liveness checks;
- ``shared_memory``: named shared-memory segments and blobs that carry arrays between processes;
- ``action_proxy`` / ``action_server``: the proxy agent a worker holds under an action server,
  and the server that runs one batched forward pass for every worker's environments;
  ``action_slot``: the shared-memory slot format and the polling wait both of them use;
- ``slot_state`` / ``slot_noise``: per-environment-slot agent state and noise streams kept by
  the action server for each worker's slots;
- ``ray_runtime``: starting and stopping a local Ray runtime (bounded; nothing of it left after a
  hung shutdown or a Ctrl-C during ``ray.init``), the ``runtime_env`` the Ray sampler and the Ray
  launcher pass on to Ray, and naming the module behind an import failure inside a Ray worker;
- ``process_tree``: the processes below a pid (from ``/proc``) and stopping them within a bound,
  also behind :mod:`corral.testing.processes`' leak checks.

Imports only ``corral.framework`` and ``corral.rl``.
"""
