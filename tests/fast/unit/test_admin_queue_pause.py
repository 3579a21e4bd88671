"""Pausing a queue from the Python API, the CLI and the dashboard (docs/admin.md, "Pausing a
queue"), on a SQLite store; that every store's claim honours the pause is the conformance
suite's (``conformance/test_queue_pause.py``), with real workers ``e2e/test_queue_pause.py``.
"""

from __future__ import annotations

import json
import re

import pytest

from celery_plus import admin
from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard
from tests.fast.unit.test_admin_cli import Store, run
from tests.fast.unit.test_admin_web_security import (  # noqa: F401  (fixtures)
    OPERATOR,
    READ_TOKEN,
    store,
    web,
)
from tests.stores.unit.test_admin_web import basic, browser_post, browser_session, call


def claimed(store: Store, queue: str = "mail") -> list[str]:  # noqa: F811
    return [c.job_id for c in store.backend.claim([queue], "w1", 10).claims]


def test_the_python_api_pauses_and_resumes_a_queue(store: Store) -> None:  # noqa: F811
    store.job("a", queue="mail")
    with connect(store.app) as a:
        paused = a.pause_queue("mail")
        assert (paused.queue, paused.paused, paused.paused_ms) == ("mail", True,
                                                                  paused.acknowledged_ms)
        assert a.paused_queues() == {"mail": paused.acknowledged_ms}
        again = a.pause_queue("mail")  # idempotent: the first pause's time is kept
        assert again.paused_ms == paused.acknowledged_ms <= again.acknowledged_ms
        with pytest.raises(ValueError, match="queue"):
            a.pause_queue("")
    assert claimed(store) == []
    store.job("b", queue="mail")  # accepted while paused; it waits
    resumed = admin.resume_queue(store.app, "mail")
    assert (resumed.paused, resumed.paused_ms) == (False, None)
    assert admin.paused_queues(store.app) == {}
    assert claimed(store) == ["a", "b"]


def test_the_cli_lists_pauses_and_resumes_queues(store: Store) -> None:  # noqa: F811
    store.job("a", queue="mail")
    store.job("b", queue="celery")
    result = run(store, "queues", "pause", "mail")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"paused mail \(acknowledged \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
                        r"store clock\)\n", result.stdout)
    lines = run(store, "queues", "ls").stdout.splitlines()
    assert lines[0].split() == ["QUEUE", "STATE", "PAUSED", "SINCE", "ENQUEUED", "SCHEDULED",
                                "RUNNING", "RESERVED"]
    assert lines[1].split()[:2] == ["celery", "active"]
    assert lines[2].split()[:2] == ["mail", "paused"] and lines[2].split()[-4:] == ["1", "0",
                                                                                   "0", "0"]
    rows = json.loads(run(store, "queues", "ls", "--json").stdout)
    assert [(r["queue"], r["paused"]) for r in rows] == [("celery", False), ("mail", True)]
    assert claimed(store) == []
    [done] = json.loads(run(store, "queues", "resume", "mail", "--json").stdout)
    assert (done["queue"], done["paused"]) == ("mail", False)
    assert claimed(store) == ["a"]
    assert run(store, "queues", "pause", "").exit_code == 2


def test_the_overview_pauses_and_resumes_a_queue_by_its_buttons(store: Store,  # noqa: F811
                                                                web: Dashboard) -> None:  # noqa: F811
    store.job("a", queue="mail")
    page = call(web, "/", headers=OPERATOR)[2]
    assert re.search(r'<form method="post" action="/queues/mail/pause">.*?'
                     r'<button id="pause-queue-mail">pause</button>', page)
    # no form token: refused, nothing changes
    assert call(web, "/queues/mail/pause", "POST", {}, headers=OPERATOR)[0] == "403 Forbidden"
    assert store.backend.paused_queues() == {}
    session = browser_session(web, "/")
    status, headers, _ = browser_post(web, "/queues/mail/pause", {}, session)
    assert status == "303 See Other"
    assert list(store.backend.paused_queues()) == ["mail"]
    assert claimed(store) == []
    path, _, query = headers["Location"].partition("?")
    page = call(web, path, query=query, headers={**OPERATOR, "HTTP_COOKIE": session[0]})[2]
    assert "paused queue mail" in page and 'id="resume-queue-mail"' in page
    assert '<span class="stale">paused</span> since' in page
    # a reader sees the state, no buttons
    read = call(web, "/", headers=basic("r", READ_TOKEN))[2]
    assert "paused</span> since" in read and "resume-queue-mail" not in read
    assert browser_post(web, "/queues/mail/resume", {}, session)[0] == "303 See Other"
    assert store.backend.paused_queues() == {}
    assert claimed(store) == ["a"]
    assert browser_post(web, "/queues/mail/stop", {}, session)[0] == "404 Not Found"
