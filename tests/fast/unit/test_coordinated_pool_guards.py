"""A coordinated worker (another broker, claims in a coordination store) on an in-process pool
gets the same SystemExit / KeyboardInterrupt guard as one on the ``plus`` transport: without
it a task leaving with SystemExit in the threads pool is never settled, so its claim in the
coordination store is renewed for ever and its slot or unique key stays held."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from celery_plus.worker import pool_guards


def test_a_coordinated_threads_worker_reports_base_exceptions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[bool] = []
    monkeypatch.setattr(pool_guards, "_coordinated", lambda consumer: True)
    monkeypatch.setattr(pool_guards.deadline, "start",
                        lambda in_process_pool: started.append(in_process_pool))

    def on_apply(*args: Any, callback: Any = None, **options: Any) -> None:
        return None

    pool = SimpleNamespace(on_apply=on_apply)
    consumer = SimpleNamespace(connection=SimpleNamespace(transport=object()), pool=pool)
    pool_guards._on_worker_ready(sender=consumer)
    assert getattr(pool.on_apply, "reports_base_exceptions", False) is True
    assert started == [True]
