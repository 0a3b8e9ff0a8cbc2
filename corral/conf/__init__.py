"""corral's Hydra configs: config.yaml, experiment/ presets and hydra/ presets."""
