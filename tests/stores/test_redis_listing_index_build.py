"""Redis: a store an earlier release wrote has dead letters and no listing index. An admin read
indexes a bounded part of them (``listing_index.READ_BATCHES`` sync calls) and, while the index
is behind, answers a task or queue filter from the walk's window, saying the index is still
being built; once the workers' maintenance has built it, the same reads come from the index,
whole and unlabelled (issue #28: the first filtered read built the whole index, 0.8 s quiet and
7.6 s at load 24 for 100,000 dead letters)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.admin import Admin, admin_for, pages
from celery_plus.admin.web import make_app
from celery_plus.model.admin import Walked
from celery_plus.stores.redis import listing_index
from tests.fast.unit.test_admin_cli import Store, admin_store, run
from tests.stores.unit.test_admin_web import ADMIN_TOKEN, call, links

#: Dead letters of the old store: d00 (oldest) to d39; every fourth is proj.rare's, and
#: queues alternate (odd: mail, even: other).
DEAD = 40
RARE = [f"d{n:02}" for n in range(DEAD - 1, -1, -1) if n % 4 == 0]  # newest first
#: Members a read may index (SYNC_BATCH here), and the walk's window.
BATCH, WINDOW = 4, 8


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(listing_index, "SYNC_BATCH", BATCH)
    monkeypatch.setattr(listing_index, "READ_BATCHES", 1)
    monkeypatch.setattr(listing_index, "BUILD_PER_TURN", BATCH)
    monkeypatch.setattr(pages, "WALK_LIMIT", WINDOW)
    with admin_store("redis", tmp_path) as store:
        for n in range(DEAD):
            store.dead(f"d{n:02}", task="proj.mail" if n % 4 else "proj.rare",
                       queue="mail" if n % 2 else "other")
        client, p = store.backend.client, store.backend.prefix  # type: ignore[attr-defined]
        client.delete(*client.keys(f"{p}:ax:*"))  # as an earlier release left it
        yield store


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Members each index_sync call read (the calls of every read, in order)."""
    calls: list[int] = []
    sync = listing_index.sync

    def counted(client: Any, prefix: str, script: Any, index: str, batches: int | None = None,
                batch: int | None = None) -> bool:
        def call(**kw: Any) -> Any:
            reply = script(**kw)
            calls.append(int(reply[0]))
            return reply
        return sync(client, prefix, call, index, batches, batch)

    monkeypatch.setattr(listing_index, "sync", counted)
    return calls


def indexed(store: Store) -> int:
    """Dead letters in the listing index (its sets by task)."""
    client, p = store.backend.client, store.backend.prefix  # type: ignore[attr-defined]
    return sum(client.zcard(k) for k in client.keys(f"{p}:ax:dead:t:*"))


def ids(page: Any) -> list[str]:
    return [row.id for row in page.items]


def test_a_read_indexes_a_bounded_part_and_answers_from_the_labelled_window(
        old_store: Store, syncs: list[int]) -> None:
    store = old_store
    with Admin(admin_for(store.backend)) as admin:
        page = admin.jobs("failed", task="proj.rare", walk_limit=WINDOW)
        assert syncs == [BATCH] and indexed(store) == BATCH  # one bounded call, no more
        # The newest WINDOW dead letters walked (d39 .. d32): proj.rare's among them.
        assert ids(page) == ["d36", "d32"] and page.total == 2
        assert page.walked == Walked(WINDOW, DEAD, building=True)
        assert page.to_dict()["walked"] == {"examined": WINDOW, "of": DEAD, "building": True}
        by_queue = admin.jobs("failed", queue="mail", task="proj.mail", walk_limit=WINDOW)
        assert ids(by_queue) == ["d39", "d37", "d35", "d33"] and by_queue.walked is not None
        oldest = admin.jobs("failed", task="proj.rare", order="oldest", walk_limit=WINDOW)
        assert ids(oldest) == ["d00", "d04"] and oldest.walked == Walked(WINDOW, DEAD, True)
        # A time range is the walk's span of P:dead (finished from d24's time on).
        client, p = store.backend.client, store.backend.prefix  # type: ignore[attr-defined]
        since = client.zscore(f"{p}:dead", "d24")
        in_range = client.zcount(f"{p}:dead", since, "+inf")
        timed = admin.jobs("failed", task="proj.rare", since=since / 1000, walk_limit=WINDOW)
        assert ids(timed) == ["d36", "d32"] and timed.walked == Walked(WINDOW, in_range, True)
        found = admin.jobs("failed", task="proj.rare", text="smtp", text_limit=100,
                           walk_limit=WINDOW)
        assert ids(found) == ["d36", "d32"] and found.walked == Walked(WINDOW, DEAD, True)
        whole = admin.jobs("failed", task="proj.rare")  # the API's default: walk them all
        assert ids(whole) == RARE and whole.walked is None
        # The per-queue counts say what they leave out.
        st = admin.status()
        assert st.unindexed > 0 and sum(q.failed for q in st.queues) + st.unindexed == DEAD
        assert st.to_dict()["unindexed"] == st.unindexed
        # The per-task dead letters: a walk of the window for the first task says the index
        # is behind, so all are counted among the newest WINDOW (one read), and said so.
        tasks = admin.task_breakdown(sample=WINDOW)
        assert "dead" in tasks.sampled
        assert {t.name: t.dead for t in tasks.tasks} == {"proj.mail": 6, "proj.rare": 2}
        assert syncs == [BATCH] * 8 and indexed(store) == 8 * BATCH  # a bounded part each


def test_the_cli_and_the_dashboard_say_the_index_is_being_built_and_walk_all_on_request(
        old_store: Store) -> None:
    store = old_store
    cut = run(store, "jobs", "failed", "--task", "proj.rare", "--walk-limit", str(WINDOW))
    assert cut.exit_code == 0, cut.output
    assert f"listed among the first {WINDOW} of the {DEAD} failed jobs only" in cut.output
    assert "still being built" in cut.output and "d12" not in cut.output
    status = run(store, "store-status")
    assert "dead letters are not in the per-queue counts yet" in status.output
    web = make_app(store.app, admin_token=ADMIN_TOKEN)
    try:
        page = call(web, "/jobs/failed", query="task=proj.rare")[2]
        assert 'id="walked"' in page and "still being built" in page and "d12" not in page
        [walk_all] = [link for link in links(page) if "walk=all" in link]
        path, _, query = walk_all.partition("?")
        page = call(web, path, query=query)[2]
        assert all(job_id in page for job_id in RARE) and 'id="walked"' not in page
        overview = call(web, "/")[2]
        assert 'id="unindexed"' in overview and "still being built" in overview
    finally:
        web.close()


def test_once_the_maintenance_built_the_index_reads_are_whole_and_unlabelled(
        old_store: Store, syncs: list[int]) -> None:
    store = old_store
    client, p = store.backend.client, store.backend.prefix  # type: ignore[attr-defined]
    for _turn in range(DEAD):
        store.backend.run_maintenance()
        if listing_index.caught_up(client, p, "dead"):
            break
    assert listing_index.caught_up(client, p, "dead") and indexed(store) == DEAD
    del syncs[:]
    with Admin(admin_for(store.backend)) as admin:
        page = admin.jobs("failed", task="proj.rare", walk_limit=WINDOW)
        assert ids(page) == RARE and page.total == len(RARE) and page.walked is None
        assert syncs == []  # caught up: the store indexes dead letters as they die
        found = admin.jobs("failed", task="proj.rare", text="smtp", text_limit=100,
                           walk_limit=WINDOW)
        assert ids(found) == RARE and found.walked is None
        st = admin.status()
        assert st.unindexed == 0
        assert {q.queue: q.failed for q in st.queues} == {"mail": 20, "other": 20}
        assert "dead" not in admin.task_breakdown().sampled
    assert syncs == []
    web = make_app(store.app, admin_token=ADMIN_TOKEN)
    try:
        overview = call(web, "/")[2]
        assert 'id="queues"' in overview and 'id="unindexed"' not in overview
    finally:
        web.close()
