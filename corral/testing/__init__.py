"""Tools for testing samplers, workers and plugins against corral's contracts."""
