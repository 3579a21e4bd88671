"""Search by id, task-name part and text from the CLI and the dashboard (issue #28): the
store-level rules are ``tests/fast/conformance/test_admin_search.py``'s; here what each
surface shows of them (the job with this id, the matching task names, the scan window)."""

from __future__ import annotations

import json

from celery_plus.admin.web import make_app
from tests.fast.unit.test_admin_cli import Store, run, store  # noqa: F401
from tests.stores.unit.test_admin_web import ADMIN_TOKEN, call, links


def test_the_cli_finds_a_job_by_id_and_lists_task_names(store: Store) -> None:  # noqa: F811
    store.job("inv-1", task="billing.send_invoice", args=["acme"])
    store.job("rep-1", task="reports.build", args=["acme"])
    by_id = run(store, "jobs", "enqueued", "--text", "rep-1")
    assert by_id.exit_code == 0, by_id.output
    assert "rep-1" in by_id.output and "inv-1" not in by_id.output
    assert "the job with this id" in by_id.output
    names = run(store, "jobs", "enqueued", "--text", "SEND_INV")
    assert "inv-1" in names.output and "rep-1" not in names.output
    assert "tasks whose name contains it (--task NAME to list one): billing.send_invoice" \
        in names.output
    text = run(store, "jobs", "enqueued", "--text", "acme", "--json")
    assert sorted(row["id"] for row in json.loads(text.stdout)["items"]) == [
        "inv-1", "rep-1"]


def test_the_cli_searches_a_window_and_says_so(store: Store) -> None:  # noqa: F811
    for n in range(3):
        store.job(f"w{n}", args=["needle"])
    cut = run(store, "jobs", "enqueued", "--text", "needle", "--text-limit", "2")
    assert cut.exit_code == 0, cut.output
    assert "text searched in the first 2 enqueued jobs" in cut.output
    assert "w0" not in cut.output and "w2" in cut.output
    whole = run(store, "jobs", "enqueued", "--text", "needle", "--text-limit", "0")
    assert "w0" in whole.output and "text searched" not in whole.output
    bad = run(store, "jobs", "enqueued", "--text", "a\x00b")
    assert bad.exit_code == 2 and "text" in bad.output


def test_the_dashboard_search_box_finds_ids_and_task_names(store: Store) -> None:  # noqa: F811
    store.job("inv-1", task="billing.send_invoice")
    store.job("rep-1", task="reports.build")
    web = make_app(store.app, admin_token=ADMIN_TOKEN)
    try:
        page = call(web, "/jobs/enqueued", query="text=rep-1")[2]
        assert 'id="by-id"' in page and "rep-1" in page and "inv-1" not in page
        page = call(web, "/jobs/enqueued", query="text=send_")[2]
        assert 'id="task-names"' in page and "inv-1" in page and "rep-1" not in page
        [name_link] = [link for link in links(page) if "task=billing.send_invoice" in link]
        path, _, query = name_link.partition("?")
        assert "text=send_" in query  # the same search, in that task's jobs
        listing = call(web, path, query=query)[2]
        assert "inv-1" in listing and "rep-1" not in listing
        assert 'id="task-names"' in listing  # (the note again, its links still one task each)
        status, _, page = call(web, "/jobs/enqueued", query="text=a%00b")
        assert status.startswith("400") and "text" in page
    finally:
        web.close()
