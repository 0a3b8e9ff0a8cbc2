"""corral-testplugin: a third-party corral plugin (``sampler=testlocal``, ``worker=testworker``)."""

__version__ = "0.1.0"
