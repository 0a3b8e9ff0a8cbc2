"""Hydra launchers that corral ships: ``hydra/launcher=ray`` runs a sweep's jobs on a Ray cluster.

The Hydra-facing classes live in ``hydra_plugins.corral_*_launcher`` (Hydra only instantiates
launchers from that namespace); the work is done here. :mod:`corral.launchers.job_death` is what
every corral launcher (joblib, submitit_local/slurm, ray) says and records for a job whose process
died: the job's ``[job N] corral: error:`` line, its failed ``summary.json`` and the failed result
the sweep ends with.
"""
