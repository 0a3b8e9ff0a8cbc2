"""Meta-RL building blocks: tasks, trials, context and meta-evaluation.

Who uses it: the RL2 and PEARL plugins (workers, algorithms, policies, task envs) and a
third-party meta-RL method. It holds:

- ``tasks``: task splits, schedules and samplers that turn tasks into ``env_update`` s;
- ``task_envs`` / ``half_cheetah_tasks``: task-carrying environment factories;
- ``trial_tasks`` / ``rl2_env``: trial bookkeeping and the RL2 observation wrapper;
- ``context_encoder`` / ``task_replay``: PEARL's context encoder and per-task replay buffers;
- ``meta_eval``: meta-test evaluation (adapt on a task, then evaluate).

Imports only ``corral.framework`` and ``corral.rl``.
"""
