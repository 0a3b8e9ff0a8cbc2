"""Results of runs and sweeps: each run's ``summary.json``, tables across seeds, learning curves.

``corral results <dir>`` and ``corral plot <dir>`` are thin wrappers over :mod:`.table` and
:mod:`.plot`; :mod:`.summary` writes and finds the per-run summaries; :mod:`.writable` says,
before anything is written, why a directory could not be.
"""
