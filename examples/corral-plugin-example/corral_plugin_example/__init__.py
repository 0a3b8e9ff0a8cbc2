"""corral-plugin-example: a complete third-party corral plugin to copy from.

Components (registered in :mod:`corral_plugin_example.plugin`):

- ``worker=noisy_obs``: the vectorised worker with Gaussian observation noise
  (:mod:`corral_plugin_example.noisy_obs`);
- ``env=goal_chain``: a small gymnasium environment with tasks (:mod:`corral_plugin_example.goal_chain`);
- ``logger=jsonl``: one JSON line per epoch in ``<run dir>/progress.jsonl``
  (:mod:`corral_plugin_example.jsonl`);
- ``algo=reinforce``: REINFORCE with a learned value baseline (:mod:`corral_plugin_example.reinforce`);
- ``experiment=example_quick``: a preset using the worker, environment and logger
  (``conf/experiment/example_quick.yaml``).
"""

__version__ = "0.1.0"
