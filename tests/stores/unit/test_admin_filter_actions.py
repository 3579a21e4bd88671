"""Select all on a page and act on every match of a filter (issue 28), from the Python API, the
CLI and the dashboard, on SQLite, Redis and PostgreSQL: retry, discard and cancel take the
listing's filters (text and time range included), work in bounded batches, say how many they
acted on, and touch nothing outside the filter."""

from __future__ import annotations

import json
import re

import pytest

from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard
from celery_plus.model.admin import BulkResult
from tests.fast.unit.test_admin_cli import Store, run
from tests.fast.unit.test_admin_web_security import OPERATOR
from tests.stores.unit.test_admin_web import browser_post, browser_session, call


def seed_dead(store: Store) -> None:
    for n in range(7):
        store.dead(f"smtp-{n}", error="SMTP down")
    store.dead("card-0", error="card declined")
    store.dead("other-0", task="proj.bill", error="SMTP down")


def test_every_match_of_a_text_filter_in_small_batches(store: Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from celery_plus.admin import filter_actions

    monkeypatch.setattr(filter_actions, "COLLECT", 4)  # two passes over the candidates
    seed_dead(store)
    with connect(store.app) as admin:
        assert admin.count_matching("failed", text="smtp", task="proj.mail") == 7
        result = BulkResult("retry")
        filter_actions.act_on_filter(admin, "retry", "failed", text="smtp", task="proj.mail",
                                     batch=3, result=result)
        assert sorted(result.changed) == [f"smtp-{n}" for n in range(7)]
        assert result.matched == 7 and not result.conflicts
        assert store.state("card-0") == store.state("other-0") == "failed"
        done = admin.act_on_filter("discard", "failed", text="declined")
        assert done.changed == ["card-0"] and store.state("card-0") == "discarded"
        assert admin.act_on_filter("discard", "failed", text="declined").matched == 0
        with pytest.raises(ValueError, match="failed"):
            admin.act_on_filter("discard", "enqueued")


def test_cancel_every_waiting_job_of_a_queue_and_time_range(store: Store) -> None:
    for n in range(5):
        store.job(f"w{n}", queue="mail")
    store.job("keep", queue="celery")
    with connect(store.app) as admin:
        assert admin.count_matching("enqueued", queue="mail", until=0) == 0  # before 1970
        assert admin.count_matching("enqueued", queue="mail") == 5
        done = admin.act_on_filter("cancel", "enqueued", queue="mail")
        assert sorted(done.changed) == [f"w{n}" for n in range(5)] and done.matched == 5
    assert store.state("keep") == "enqueued" and store.state("w0") == "canceled"


def test_the_cli_asks_with_the_count_then_acts(store: Store) -> None:
    seed_dead(store)
    declined = run(store, "bulk", "retry", "failed", "--text", "SMTP", input="n\n")
    assert declined.exit_code == 1
    assert "Retry 8 failed jobs (text SMTP)?" in declined.output
    assert store.state("smtp-0") == "failed"
    done = run(store, "bulk", "retry", "failed", "--text", "SMTP", "--task", "proj.mail",
               "--yes")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == "retried 7 of 7 matching failed jobs"
    data = json.loads(run(store, "bulk", "cancel", "enqueued", "--task", "proj.mail", "--yes",
                          "--json").stdout)
    assert data["changed"] == 7 and store.state("smtp-3") == "canceled"
    assert run(store, "bulk", "cancel", "failed", "--yes").exit_code == 2


def test_select_all_on_a_page_then_every_match_of_the_filter_on_the_dashboard(
        store: Store, web: Dashboard) -> None:
    seed_dead(store)
    session = browser_session(web)
    operator = {**OPERATOR, "HTTP_COOKIE": session[0]}
    page = call(web, "/jobs/failed", query="text=SMTP&per_page=3", headers=operator)[2]
    assert page.count("checked>") == 0 and 'id="select-all"' in page
    link = re.search(r'href="([^"]+)" id="select-all"', page)
    assert link is not None and "select=all" in link.group(1)
    ticked = call(web, "/jobs/failed", query="text=SMTP&per_page=3&select=all",
                  headers=operator)[2]
    boxes = re.findall(r'<input type="checkbox" name="id" value="([^"]+)"[^>]*checked>', ticked)
    assert len(boxes) == 3 and 'id="select-none"' in ticked
    # the ticked page's form posts those 3 (a browser sends every checked box)
    status, _, confirm = browser_post(web, "/jobs/failed/bulk",
                                      [("do", "discard:selected"), ("text", "SMTP"),
                                       *(("id", b) for b in boxes)], session)
    assert status == "200 OK" and "the 3 selected failed jobs" in confirm
    # every match of the text filter: the confirmation says how many
    assert 'value="retry:scope"' in ticked and 'value="discard:scope"' in ticked
    form = [("do", "retry:scope"), ("text", "SMTP")]
    status, _, confirm = browser_post(web, "/jobs/failed/bulk", form, session)
    assert status == "200 OK"
    assert "all 8 failed jobs of this filter (text &#x27;SMTP&#x27;)" in confirm
    assert store.state("smtp-0") == "failed"
    status, _, text = browser_post(web, "/jobs/failed/bulk", [*form, ("confirm", "1")],
                                   session)
    assert status == "303 See Other" and "retried 8 of 8 matching failed jobs" in text
    assert store.state("card-0") == "failed" and store.state("other-0") == "enqueued"
    # cancel every waiting job of a filter
    status, _, confirm = browser_post(web, "/jobs/enqueued/bulk",
                                      [("do", "cancel:scope"), ("task", "proj.bill")], session)
    assert status == "200 OK" and "all 1 enqueued job of this filter" in confirm
    browser_post(web, "/jobs/enqueued/bulk",
                 [("do", "cancel:scope"), ("task", "proj.bill"), ("confirm", "1")], session)
    assert store.state("other-0") == "canceled" and store.state("smtp-0") == "enqueued"
