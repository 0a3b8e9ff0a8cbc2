"""The contracts and machinery of corral. Nothing here imports a plugin."""
