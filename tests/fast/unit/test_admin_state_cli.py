"""The admin-state features from the command line and the Python API (issue 28; docs/admin.md
"Reserved and running"), through click's runner on a real store: here SQLite,
``tests/stores/unit/test_admin_state_cli.py`` runs the same cases on Redis and PostgreSQL.

A job its worker claimed but has not started (a heartbeat's ``NOT_STARTED`` start mark) is
listed and shown as ``reserved``, apart from the ones running.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_plus import Celery, admin
from celery_plus.model.store import NOT_STARTED, Settle
from tests.fast.unit.test_admin_cli import REDIS_URL, Store, as_json, drop_store, run


@contextlib.contextmanager
def state_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """An app on a store of ``kind`` (sqlite, redis or postgres) with its admin's backend."""
    from tests.fast.conformance.stores import PG_URL

    prefix = f"s{uuid.uuid4().hex[:10]}"
    broker = {"sqlite": f"plus+sqlite:///{tmp_path / 'store.db'}",
              "redis": f"plus+{REDIS_URL}", "postgres": f"plus+{PG_URL}"}[kind]
    app = Celery("admin-state", broker=broker, set_as_current=False)
    app.conf.plus_key_prefix = prefix
    app.conf.plus_pg_schema = prefix
    a = admin.connect(app)
    try:
        yield Store(app, a.store.backend)  # type: ignore[attr-defined]
    finally:
        a.close()
        app.close()
        drop_store(kind, prefix)


@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with state_store(request.param, tmp_path) as made:
        yield made


def _reserved_and_running(store: Store) -> None:
    """Job ``r`` claimed, not started (reserved); job ``s`` claimed and started."""
    store.job("r")
    store.job("s")
    got = {c.job_id: c for c in store.backend.claim(["celery"], "w1", 2).claims}
    store.backend.heartbeat([("r", got["r"].token), ("s", got["s"].token)], [NOT_STARTED, 0])


def test_the_api_tells_reserved_from_running(store: Store) -> None:
    _reserved_and_running(store)
    page = admin.jobs(store.app, "running")
    assert {r.id: r.reserved for r in page.items} == {"r": True, "s": False}
    assert admin.show(store.app, "r").summary.reserved
    assert not admin.show(store.app, "s").summary.reserved
    assert page.to_dict()["items"][0]["reserved"] in (True, False)


def test_jobs_running_lists_reserved_apart(store: Store) -> None:
    _reserved_and_running(store)
    result = run(store, "jobs", "running")
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert header.split()[:5] == ["TASK", "ID", "TASK", "QUEUE", "STATE"]
    states = {line.split()[0]: line.split()[3] for line in lines if line[:1] in "rs"}
    assert states == {"r": "reserved", "s": "running"}
    data = as_json(run(store, "jobs", "running", "--json"))
    assert {i["id"]: i["reserved"] for i in data["items"]} == {"r": True, "s": False}


def test_dlq_show_names_a_reserved_job_reserved(store: Store) -> None:
    _reserved_and_running(store)
    shown = run(store, "dlq", "show", "r")
    assert shown.exit_code == 0, shown.output
    assert "State:        reserved" in shown.output
    assert "State:        running" in run(store, "dlq", "show", "s").output


# -- workers by Celery name, with health ---------------------------------------------------
def test_workers_are_listed_by_node_name_with_health_from_the_store(store: Store) -> None:
    from celery_plus.model.store import WorkerBeat, worker_health

    store.backend.worker_beat(WorkerBeat(node="w1@h1", host="h1", pid=4242,
                                         queues=("celery", "mail"), interval_ms=2000))
    store.job("held")
    [got] = store.backend.claim(["celery"], "h1:4242:abcd", 1).claims  # a lease of pid 4242
    assert got.job_id == "held"
    [view] = admin.list_workers(store.app)
    assert (view.node, view.host, view.pid, view.jobs, view.health) == (
        "w1@h1", "h1", 4242, 1, "alive")
    assert view.queues == ["celery", "mail"] and view.worker_ids == ["h1:4242:abcd"]
    assert view.answered is None  # nobody was asked: no broadcast
    result = run(store, "workers")
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split()[:3] == ["WORKER", "HEALTH", "HOST"]
    assert row.split()[:4] == ["w1@h1", "alive", "h1", "4242"] and "celery,mail" in row
    [data] = as_json(run(store, "workers", "--json"))
    assert (data["node"], data["health"], data["jobs"]) == ("w1@h1", "alive", 1)
    # health from the last beat and the worker's own interval
    assert [worker_health(0, 2000, now) for now in (5000, 5001, 13000, 13001)] == [
        "alive", "late", "late", "gone"]


def test_a_worker_without_a_record_is_seen_by_its_leases(store: Store) -> None:
    store.job("held")
    store.backend.claim(["celery"], "h9:77:abcd", 1)
    [view] = admin.list_workers(store.app)
    assert (view.node, view.host, view.pid, view.jobs, view.health) == ("", "h9", 77, 1,
                                                                         "unknown")


# -- /metrics, limits in use, rate-limited vs concurrency-blocked --------------------------
def _limited_jobs(store: Store) -> dict[str, str]:
    """Customer 42's report runs (its group full) and one waits behind it; customer 43's
    runs; acme's send started (rate window full) and one more is parked. Returns the job ids
    by role."""
    for job_id, key in (("r42", "42"), ("r42b", "42"), ("r43", "43")):
        store.job(job_id, task="proj.report", concurrency_group=f"proj.report:{key}",
                  concurrency_limit=1, args=[f"customer-{key}"])
    for job_id in ("s1", "s2"):
        store.job(job_id, task="proj.send", queue="mail", rate_group='proj.send:"acme"',
                  rate_limit=1, rate_window_ms=60_000, args=["to-acme"])
    claimed = store.backend.claim(["celery"], "w1", 10)
    assert sorted(c.job_id for c in claimed.claims) == ["r42", "r43"], claimed
    [send] = store.backend.claim(["mail"], "w1", 1).claims
    store.backend.rate_started(send.job_id, send.token)
    assert not store.backend.claim(["mail"], "w1", 1).claims  # the window is full: parked
    return {"blocked": "r42b", "parked": "s2" if send.job_id == "s1" else "s1"}


def test_limits_in_use_per_key_from_the_api_and_the_cli(store: Store) -> None:
    ids = _limited_jobs(store)
    found = {(t.task, t.kind): t for t in admin.list_limits(store.app)}
    report = found[("proj.report", "concurrency")]
    assert report.groups == 2
    assert [(k.key, k.used, k.limit, k.waiting, k.full) for k in report.keys] == [
        ("42", 1, 1, 1, True), ("43", 1, 1, 0, True)]
    [acme] = found[("proj.send", "rate")].keys
    assert (acme.key, acme.starts, acme.pending, acme.limit, acme.waiting, acme.full) == (
        '"acme"', 1, 0, 1, 1, True)
    assert acme.window_ms >= 60_000
    assert [k.key for k in admin.list_limits(store.app, top=1)[0].keys] == ["42"]
    result = run(store, "limits")
    assert result.exit_code == 0, result.output
    assert any(line.split()[:4] == ["proj.report", "concurrency", "42", "1/1"]
               for line in result.output.splitlines()), result.output
    assert any(line.split()[:4] == ["proj.send", "rate", '"acme"', "1+0/1"]
               for line in result.output.splitlines()), result.output
    data = as_json(run(store, "limits", "--json", "--top", "1"))
    assert {(t["task"], t["kind"], t["groups"], len(t["keys"])) for t in data} == {
        ("proj.report", "concurrency", 2, 1), ("proj.send", "rate", 1, 1)}
    assert run(store, "limits", "--top", "0").exit_code == 2
    # the blocked listing tells a rate-limited job from a concurrency-blocked one
    rows = {r.id: r.rate_limited for r in admin.jobs(store.app, "blocked").items}
    assert rows == {ids["blocked"]: False, ids["parked"]: True}
    for text, job_id, limited in (("customer-42", ids["blocked"], False),
                                  ("to-acme", ids["parked"], True)):  # a text search's rows
        [row] = admin.jobs(store.app, "blocked", text=text).items
        assert (row.id, row.rate_limited) == (job_id, limited)
    listed = run(store, "jobs", "blocked").output
    states = {line.split()[0]: line.split()[3] for line in listed.splitlines()[1:]
              if line.split() and line.split()[0] in ids.values()}
    assert states == {ids["blocked"]: "blocked", ids["parked"]: "rate-limited"}, listed


def test_metrics_keep_key_values_out_of_labels_unless_asked(store: Store) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from celery_plus.admin.metrics import metrics_text
    from celery_plus.model.store import WorkerBeat

    _limited_jobs(store)
    store.backend.worker_beat(WorkerBeat(node="w1@h1", host="h1", pid=7, interval_ms=2000))
    store.job("q1", queue="quick")
    [quick] = store.backend.claim(["quick"], "w1", 1).claims
    store.backend.settle([Settle("q1", quick.token, "ack", run_ms=0)])
    with admin.connect(store.app) as a:
        text = metrics_text(a)
        keyed = metrics_text(a, key_labels=True)
        [ran] = a.runtime()
    assert (ran.queue, ran.samples) == ("quick", 1) and ran.p95_s < 1
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("celery_plus_group_running", (("group", "proj.report:*"),))] == 2
    assert samples[("celery_plus_group_blocked", (("group", "proj.report:*"),))] == 1
    assert samples[("celery_plus_group_limit", (("group", "proj.report:*"),))] == 1
    assert samples[("celery_plus_rate_limit_starts", (("group", "proj.send:*"),))] == 1
    assert samples[("celery_plus_rate_limit_parked", (("group", "proj.send:*"),))] == 1
    assert samples[("celery_plus_rate_limit_limit", (("group", "proj.send:*"),))] == 1
    assert samples[("celery_plus_worker_up", (("worker", "w1@h1"),))] == 1
    assert ("celery_plus_queue_oldest_waiting_seconds", (("queue", "mail"),)) in samples
    assert ("celery_plus_wait_seconds", (("quantile", "0.5"), ("queue", "celery"))) in samples
    assert ("celery_plus_runtime_seconds", (("quantile", "0.95"), ("queue", "quick"))) in samples
    values = {v for _, labels in samples for _, v in labels}
    assert not any("42" in v or "acme" in v for v in values), "a key value became a label"
    keyed_samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                     for f in text_string_to_metric_families(keyed) for s in f.samples}
    assert keyed_samples[("celery_plus_group_running", (("group", "proj.report:42"),))] == 1
    assert keyed_samples[("celery_plus_rate_limit_starts",
                          (("group", 'proj.send:"acme"'),))] == 1


def test_the_metrics_key_labels_setting_is_checked_and_used(store: Store) -> None:
    from celery.exceptions import ImproperlyConfigured

    from celery_plus.admin.web import Dashboard

    _limited_jobs(store)
    store.app.conf.plus_admin_metrics_key_labels = "yes"
    with pytest.raises(ImproperlyConfigured, match="plus_admin_metrics_key_labels='yes'"):
        Dashboard(store.app)
    store.app.conf.plus_admin_metrics_key_labels = True
    web = Dashboard(store.app)
    try:
        assert web.metrics_key_labels is True
    finally:
        web.close()


def test_counts_status_and_metrics_tell_reserved_from_running(store: Store) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from celery_plus.admin.metrics import metrics_text

    _reserved_and_running(store)
    store.job("w")  # one waiting
    counts = admin.counts(store.app)
    assert (counts.enqueued, counts.running, counts.reserved) == (1, 1, 1)
    [queue] = admin.status(store.app).queues
    assert (queue.queue, queue.enqueued, queue.running, queue.reserved) == ("celery", 1, 1, 1)
    lines = run(store, "jobs").stdout.splitlines()
    assert [line.split() for line in lines[4:6]] == [["running", "1"], ["reserved", "1"]]
    assert as_json(run(store, "jobs", "--json"))["reserved"] == 1
    status = run(store, "store-status").stdout.splitlines()
    assert status[0].split()[:7] == ["QUEUE", "ENQUEUED", "SCHEDULED", "BLOCKED", "RUNNING",
                                     "RESERVED", "FAILED"]
    assert status[1].split()[:7] == ["celery", "1", "0", "0", "1", "1", "0"]
    with admin.connect(store.app) as a:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(metrics_text(a)) for s in f.samples}
    assert samples[("celery_plus_jobs", (("state", "running"),))] == 1
    assert samples[("celery_plus_jobs", (("state", "reserved"),))] == 1
    assert samples[("celery_plus_queue_jobs", (("queue", "celery"), ("state", "reserved")))] == 1
    # its task starts: running, no longer reserved
    [got] = [c for c in [store.backend.record("r")] if c is not None]
    store.backend.heartbeat([("r", got.lease_token)], [0])
    counts = admin.counts(store.app)
    assert (counts.running, counts.reserved) == (2, 0)


def test_the_overview_shows_reserved_apart_from_running(store: Store) -> None:
    import re

    from celery_plus.admin.web import Dashboard
    from tests.fast.unit.test_admin_web_security import OPERATOR
    from tests.stores.unit.test_admin_web import ADMIN_TOKEN, call

    _reserved_and_running(store)
    store.app.conf.plus_admin_token = ADMIN_TOKEN
    web = Dashboard(store.app)
    try:
        status, _, page = call(web, "/", headers=OPERATOR)
    finally:
        web.close()
    assert status == "200 OK", page
    counts = re.search(r'<table id="counts">(.*?)</table>', page, re.S)
    assert counts is not None
    cells = dict(re.findall(r"<tr><td><a [^>]*>(\w+)</a></td><td>(\d+)</td></tr>",
                            counts.group(1)))
    assert (cells["running"], cells["reserved"]) == ("1", "1")
    queues = re.search(r'<table id="queues">(.*?)</table>', page, re.S)
    assert queues is not None
    header = re.findall(r"<th>([^<]*)</th>", queues.group(1))
    row = re.findall(r"<td>([^<]*)</td>", queues.group(1).split("</tr>")[1])
    assert header[4:6] == ["running", "reserved"] and row[4:6] == ["1", "1"], (header, row)
    assert re.search(r'id="nav-running">running \(1\)</a>', page)
    assert re.search(r'id="nav-reserved">reserved \(1\)</a>', page)
