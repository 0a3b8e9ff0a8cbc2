"""Hydra launchers that corral ships: ``hydra/launcher=ray`` runs a sweep's jobs on a Ray cluster.

The Hydra-facing class lives in ``hydra_plugins.corral_ray_launcher`` (Hydra only instantiates
launchers from that namespace); the work is done here.
"""
