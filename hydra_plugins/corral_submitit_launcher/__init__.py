"""corral's presets of Hydra's submitit launcher (``hydra/launcher=submitit_slurm``, ``submitit_local``)."""
