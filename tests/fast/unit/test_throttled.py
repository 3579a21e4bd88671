"""``runtime/throttled.py``: one warning a while, per kind."""

from __future__ import annotations

import logging

import pytest

from celery_plus.runtime import throttled
from celery_plus.runtime.throttled import Throttled


def test_one_warning_per_kind_a_while_the_rest_quiet(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    monkeypatch.setattr(throttled.time, "monotonic", lambda: now[0])
    logger = logging.getLogger("test.throttled")
    warnings = Throttled(logger, every_s=30.0, quiet_level=logging.INFO)
    with caplog.at_level(logging.INFO, logger.name):
        warnings.warn("a", "first")
        warnings.warn("a", "again")
        warnings.warn("b", "other kind")
        now[0] += 30.0
        warnings.warn("a", "later")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "celery-plus: first"), (logging.INFO, "celery-plus: again"),
        (logging.WARNING, "celery-plus: other kind"), (logging.WARNING, "celery-plus: later")]
    caplog.clear()
    silent = Throttled(logger, every_s=30.0)
    with caplog.at_level(logging.INFO, logger.name):
        silent.warn("a", "once")
        silent.warn("a", "dropped")
    assert [r.getMessage() for r in caplog.records] == ["celery-plus: once"]
