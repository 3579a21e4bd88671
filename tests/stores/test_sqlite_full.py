"""A SQLite store that cannot grow (issue 11, defect 13), without mounting anything.

SQLite's ``max_page_count`` caps the database the way a full disk does: writes fail with
"database or disk is full" (``SQLITE_FULL``). The store raises that as
:class:`~celery_plus.stores.sqlite.backend.StoreUnavailable`, a kombu connection error
naming the database file (a worker goes on, Celery retries publishes); nothing stored is
lost, and the store works again once it may grow. (``tests/deploy/faults/test_full_disk.py`` fills
a real tmpfs under running workers.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kombu.exceptions import ConnectionError as KombuConnectionError

from celery_plus.model.store import NewJob, Settle
from celery_plus.stores.sqlite.backend import SQLiteBackend, StoreUnavailable
from tests.inspectors import inspector_for


def job(n: int) -> NewJob:
    return NewJob(id=f"j{n}", queue="q", message="x" * 4000, name="t")


def cap(store: SQLiteBackend, pages: int) -> None:
    with store._lock:
        store._connection().execute(f"PRAGMA max_page_count = {pages}")


def test_a_store_that_cannot_grow_is_unavailable_naming_its_file(tmp_path: Path) -> None:
    store = SQLiteBackend(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.publish(job(0))
        claim = store.claim(["q"], "w", 1).claims[0]
        with store._lock:
            pages = store._connection().execute("PRAGMA page_count").fetchone()[0]
        cap(store, pages)
        with pytest.raises(StoreUnavailable) as raised:
            for n in range(1, 50):
                store.publish(job(n))
        assert isinstance(raised.value, KombuConnectionError)
        assert str(tmp_path / "store.db") in str(raised.value)
        assert "disk is full" in str(raised.value)
        published = [i for i in range(50) if inspector_for(store).job(f"j{i}") is not None]
        cap(store, 1_000_000)  # space is back
        assert store.settle([Settle(claim.job_id, claim.token, "ack")]) == []
        store.publish(job(99))
        assert (inspector_for(store).job("j0") or {}).get("st") == "completed"
        assert all(inspector_for(store).job(f"j{i}") is not None for i in published)
        assert (inspector_for(store).job("j99") or {}).get("st") == "enqueued"
    finally:
        store.close()
