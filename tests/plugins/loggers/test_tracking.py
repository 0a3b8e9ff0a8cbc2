"""The guard around tracker calls: one warning with the root cause, training goes on."""

from __future__ import annotations

import logging
import socket
import urllib.request
import warnings
from pathlib import Path

import pytest

from corral.plugins.loggers._tracking import Guard, TrackerWarning, failure_reason


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once this socket is closed


def test_the_reason_is_the_operating_system_error_at_the_root() -> None:
    with pytest.raises(OSError) as caught:  # a real refused connection, wrapped by urllib as URLError(reason=...)
        urllib.request.urlopen(f"http://127.0.0.1:{closed_port()}/", timeout=10)
    assert failure_reason(caught.value) == "ConnectionRefusedError: Connection refused"
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise RuntimeError("API request failed with exception HTTPConnectionPool(...): Max retries") from exc
    except RuntimeError as exc:
        assert failure_reason(exc) == "ConnectionRefusedError: Connection refused"


def test_a_file_error_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(OSError) as caught:
        (tmp_path / "missing" / "metrics.json").read_text()
    assert failure_reason(caught.value) == f"FileNotFoundError: No such file or directory: {tmp_path / 'missing' / 'metrics.json'}"


def test_without_an_os_error_the_reason_is_the_first_line_shortened() -> None:
    assert failure_reason(ValueError("bad key\nmore detail")) == "ValueError: bad key"
    long = failure_reason(ValueError("word " * 100))
    assert long.startswith("ValueError: word word") and long.endswith(" ...") and len(long) < 330
    assert failure_reason(KeyError()) == "KeyError"


def test_the_guard_warns_once_names_the_cause_and_hint_and_restores_logging() -> None:
    retry_log = logging.getLogger("urllib3.connectionpool")
    before = retry_log.level
    guard = Guard("mlflow", hint="check logger.mlflow.tracking_uri")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with guard("starting a run"):
            assert retry_log.level == logging.ERROR  # the HTTP client's retry warnings are held back
            raise ConnectionRefusedError(111, "Connection refused")
        with guard("logging metrics"):
            raise ValueError("second failure")
    assert retry_log.level == before
    assert guard.failed
    assert [(w.category, str(w.message)) for w in caught] == [(TrackerWarning,
        "mlflow logger failed while starting a run (ConnectionRefusedError: Connection refused); training goes on "
        "without mlflow; check logger.mlflow.tracking_uri")]
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C still stops the run
        with guard("logging metrics"):
            raise KeyboardInterrupt
