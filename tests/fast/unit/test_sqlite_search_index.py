"""The SQLite store's search index (``stores/sqlite/search.py``): a store made before it is
indexed on the first connection of this version, once; a SQLite without the trigram
tokenizer opens without it and its searches read their candidates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from celery_plus.admin.api import Admin
from celery_plus.model.options import StoreOptions
from celery_plus.stores.registry import admin_for
from celery_plus.stores.sqlite import admin as sqlite_admin
from celery_plus.stores.sqlite import search
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.fast.conformance.test_admin import dead, job


def _open(path: Path) -> SQLiteBackend:
    return SQLiteBackend(f"sqlite:///{path}", StoreOptions())


def _unindex(path: Path) -> None:
    """Make the store what an earlier version left: no index, no triggers, no mark."""
    with sqlite3.connect(path) as conn:
        for trigger in ("jobs_search_insert", "jobs_search_update", "jobs_search_delete"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE job_search")
        conn.execute("DROP TABLE search_rows")
        conn.execute("DELETE FROM meta WHERE key = 'search'")


def test_a_store_made_before_the_index_is_indexed_on_its_first_connection(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    backend = _open(path)
    dead(backend, "d1", error="lost connection")
    job(backend, "w1", task="proj.old_task", args=["before-upgrade"])
    backend.close()
    _unindex(path)
    backend = _open(path)
    admin = Admin(admin_for(backend))
    try:
        assert admin.text_indexed("enqueued", "before")
        assert [r.id for r in admin.jobs("enqueued", text="BEFORE-UP").items] == ["w1"]
        assert [r.id for r in admin.jobs("enqueued", text="old_ta").items] == ["w1"]
        assert [r.id for r in admin.jobs("failed", text="lost conn").items] == ["d1"]
        job(backend, "w2", args=["after-upgrade"])  # the triggers keep it from now on
        assert [r.id for r in admin.jobs("enqueued", text="-upgrade").items] == ["w2", "w1"]
    finally:
        admin.close()
        backend.close()
    with sqlite3.connect(path) as conn:  # indexed once: a row each, the mark set
        assert conn.execute("SELECT count(*) FROM search_rows").fetchone() == (3,)
        assert conn.execute("SELECT value FROM meta WHERE key = 'search'").fetchone() == (1,)


def test_without_the_trigram_tokenizer_the_store_opens_and_searches_by_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "_TABLES", search._TABLES.replace("'trigram'", "'trigramx'"))
    backend = _open(tmp_path / "plain.db")
    admin = Admin(admin_for(backend))
    try:
        job(backend, "w1", args=["findme"])
        assert not admin.text_indexed("enqueued", "findme")
        assert [r.id for r in admin.jobs("enqueued", text="findme").items] == ["w1"]
    finally:
        admin.close()
        backend.close()


def test_a_common_text_of_a_finished_state_lists_the_same_jobs_read_in_index_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_admin, "COMMON", 3)
    backend = _open(tmp_path / "common.db")
    admin = Admin(admin_for(backend))
    try:
        for i in range(4):
            dead(backend, f"d{i}", error=f"boom {i}")
        assert sqlite_admin.SQLiteAdmin._common(admin.store, search.match("boom"), 3)
        assert not sqlite_admin.SQLiteAdmin._common(admin.store, search.match("boom 1"), 3)
        page = admin.jobs("failed", text="BOOM", per_page=3)
        assert ([r.id for r in page.items], page.total) == (["d3", "d2", "d1"], 4)
        assert [r.id for r in admin.jobs("failed", text="boom", order="oldest").items] == [
            "d0", "d1", "d2", "d3"]
        assert [r.id for r in admin.jobs("failed", text="boom 1").items] == ["d1"]
    finally:
        admin.close()
        backend.close()
