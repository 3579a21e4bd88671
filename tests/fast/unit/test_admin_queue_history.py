"""Queue depth and wait over time (issue 28; docs/admin.md "Queue depth and wait over time"):
the sample a worker's maintenance turn records, the store's bounds on it, and what the
Python API, the CLI and the dashboard show of it. Here on SQLite (and the keeper's turn on
the in-process store too); ``tests/stores/unit/test_admin_queue_history.py`` runs the cases
that take ``store`` on Redis and PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus import admin, settings
from celery_plus.admin.web import Dashboard, make_app
from celery_plus.leases.keeper import LeaseKeeper
from celery_plus.stores.admin_base.queue_history import (
    RETENTION_MS,
    STEP_MS,
    decode,
    encode,
    record_sample,
)
from celery_plus.stores.memory.backend import MemoryBackend
from celery_plus.stores.registry import admin_for
from tests.fast.unit.test_admin_cli import Store, run
from tests.fast.unit.test_admin_web_security import OPERATOR, security_store
from tests.stores.unit.test_admin_web import call

#: A bucket step no test run crosses (the buckets of a real step change every minute).
FIXED_STEP = 10**12


@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with security_store(request.param, tmp_path) as made:
        yield made


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app)
    yield dashboard
    dashboard.close()


class _Keeper(LeaseKeeper):
    """A lease keeper with nothing to renew: only its maintenance turn is driven."""

    def held(self) -> list[tuple[str, int]]:
        return []


def _waiting(store: Store) -> int:
    """Three jobs enqueued on ``mail``, one on ``billing``; the store's clock before them."""
    before = store.backend.now_ms()
    for n in range(3):
        store.job(f"m{n}", queue="mail")
    store.job("b0", queue="billing")
    return before


def test_a_sample_holds_each_queues_depth_and_oldest_wait_once_per_bucket(store: Store
                                                                          ) -> None:
    before = _waiting(store)
    a = admin_for(store.backend)
    assert record_sample(a, FIXED_STEP, FIXED_STEP * 10)  # type: ignore[arg-type]
    # the same bucket again (another worker's turn): the first sample stays
    store.job("m3", queue="mail")
    assert not record_sample(a, FIXED_STEP, FIXED_STEP * 10)  # type: ignore[arg-type]
    [(bucket, at, sample)] = a.history_rows(0, 2**62)  # type: ignore[attr-defined]
    assert bucket == FIXED_STEP and before <= at <= store.backend.now_ms()
    queues = decode(sample)
    assert set(queues) == {"mail", "billing"}
    assert queues["mail"][0] == 3 and queues["billing"][0] == 1
    oldest = queues["mail"][1]
    assert oldest is not None and before <= oldest <= at


def test_the_store_keeps_the_first_sample_of_a_bucket_and_drops_old_ones(store: Store) -> None:
    a: Any = admin_for(store.backend)
    assert a.history_put(60_000, 60_001, encode([("q", 1, None)]), 0)
    assert not a.history_put(60_000, 60_002, encode([("q", 9, None)]), 0)
    assert a.history_put(120_000, 120_001, encode([("q", 2, 100_000)]), 0)
    assert [(b, decode(s)["q"]) for b, _, s in a.history_rows(0, 10**6)] == [
        (60_000, (1, None)), (120_000, (2, 100_000))]
    assert [b for b, _, _ in a.history_rows(100_000, 10**6)] == [120_000]
    # a later sample drops the buckets before its retention window
    assert a.history_put(180_000, 180_001, encode([]), 120_000)
    assert [b for b, _, _ in a.history_rows(0, 10**6)] == [120_000, 180_000]


def test_the_maintenance_turn_records_the_sample_once_per_interval(store: Store) -> None:
    _waiting(store)
    keeper = _Keeper("history-test", settings.resolve({}), "w1")
    keeper.maintain(store.backend)  # the store's maintenance ran: this turn samples
    a: Any = admin_for(store.backend)
    now = store.backend.now_ms()
    rows = a.history_rows(now - 2 * STEP_MS, now)
    assert rows and decode(rows[-1][2])["mail"][0] == 3
    keeper.maintain(store.backend)  # within the interval: no maintenance, no sample
    assert a.history_rows(now - 2 * STEP_MS, now) == rows


def test_the_maintenance_turn_samples_the_in_process_store_too() -> None:
    backend = MemoryBackend()
    store = Store(None, backend)  # type: ignore[arg-type]
    _waiting(store)
    _Keeper("history-test", settings.resolve({}), "w1").maintain(backend)
    rows = admin_for(backend).history_rows(0, 2**62)  # type: ignore[attr-defined]
    assert [decode(s)["mail"][0] for _, _, s in rows] == [3]


def test_a_store_the_admin_does_not_serve_is_not_sampled() -> None:
    class Bare:
        def maintain(self, worker_id: str) -> bool:
            return True

        def recover(self, limit: int = 100) -> list[Any]:
            return []

    keeper = _Keeper("history-test", settings.resolve({}), "w1")
    keeper.maintain(Bare())  # type: ignore[arg-type]
    assert keeper._history is not None and keeper._history[1] is None


def _history(store: Store) -> int:
    """Two recorded samples of ``mail`` (3 and 5 minutes ago) beside the jobs waiting now."""
    _waiting(store)
    a: Any = admin_for(store.backend)
    now = store.backend.now_ms()
    for minutes, depth in ((5, 7), (3, 4)):
        at = now - minutes * 60_000
        a.history_put(at - at % STEP_MS, at, encode([("mail", depth, at - 90_000),
                                                     ("other", 2, None)]), now - RETENTION_MS)
    return now


def test_the_api_gives_a_queue_or_every_queue_over_a_range(store: Store) -> None:
    _history(store)
    with admin.connect(store.app) as a:
        mail = a.queue_history("mail", 3600)
        assert [(p.waiting, p.live) for p in mail.points] == [(7, False), (4, False), (3, True)]
        assert [p.oldest_wait_s for p in mail.points[:2]] == [90.0, 90.0]
        assert mail.points[2].oldest_wait_s is not None and mail.points[2].oldest_wait_s >= 0
        assert mail.queues == ["billing", "mail", "other"] and mail.step_s == 60
        every = a.queue_history(None, 3600)
        assert [p.waiting for p in every.points] == [9, 6, 4]
        assert [p.waiting for p in a.queue_history("mail", 240).points] == [4, 3]
        with pytest.raises(ValueError, match="range"):
            a.queue_history("mail", 2 * 86400)
    assert json.loads(json.dumps(admin.queue_history(store.app, "mail").to_dict()))[
        "points"][0]["waiting"] == 7


def test_the_cli_prints_the_samples(store: Store) -> None:
    _history(store)
    result = run(store, "queues", "history", "--queue", "mail")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SAMPLED", "ENQUEUED", "OLDEST", "WAITED"]
    assert [line.split()[2] for line in lines[1:3]] == ["7", "4"]
    assert lines[3].split()[2:4] == ["(now)", "3"]
    data = json.loads(run(store, "queues", "history", "--range", "6h", "--json").stdout)
    assert [p["waiting"] for p in data["points"]] == [9, 6, 4]
    assert run(store, "queues", "history", "--range", "2y").exit_code == 2


def test_the_dashboard_draws_the_charts(store: Store, web: Dashboard) -> None:
    _history(store)
    status, _, page = call(web, "/history", query="queue=mail", headers=OPERATOR)
    assert status == "200 OK", page
    for chart in ("depth", "wait"):
        svg = re.search(rf'<svg [^>]*id="{chart}".*?</svg>', page)
        assert svg is not None and len(re.findall(r"<rect ", svg.group(0))) == 3
    assert re.search(r"UTC: 7 jobs enqueued", page) and "UTC: 90 s waited" in page
    cells = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert [n for _, n in cells] == ["3", "4", "7"] and cells[0][0].endswith("(now)")
    assert 'href="/history?queue=billing"' in page  # the other queues seen
    status, _, body = call(web, "/api/history", query="range=6h", headers=OPERATOR)
    assert status == "200 OK" and [p["waiting"] for p in json.loads(body)["points"]] == [
        9, 6, 4]
    assert call(web, "/history", query="range=1y", headers=OPERATOR)[0] == "400 Bad Request"
    _, _, overview = call(web, "/", headers=OPERATOR)
    assert 'id="history-link"' in overview and 'id="nav-history"' in overview
