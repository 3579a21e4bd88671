"""The admin CLI as a subprocess against a real store with a real dead letter (issue 5: "CLI
tests through click's runner and as a subprocess, human and --json output").

A real ``celery-plus worker`` runs ``proj.fail_until_fixed``, which raises until the test sets
its "fixed" flag: the failure is a real dead letter (exception type, message, traceback). The
operator's flow is then driven through ``celery-plus dlq ...`` / ``status`` / ``jobs`` (and
``celery plus ...``): list, show, retry (the worker runs the job again and it completes, once),
the idempotent repeat, a retry conflict, and purge with its confirmation. Each test runs one
command as a process where the process is what is tested (``celery-plus`` itself; Celery's
own CLI finding the ``plus`` commands through its entry point); the other steps call the
console script's function in the test's process (``tests/support.py: celery_plus``,
docs/tests.md), on the test's own app.

Runs on each durable store (``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import redis

from celery_plus.admin import connect
from celery_plus.admin.web import Mount, make_app
from celery_plus.model.store import Backend, NewJob, Settle
from tests.inspectors import inspector_for
from tests.support import celery_plus

from . import proj
from .conftest import CELERY_PLUS, PLAIN_CELERY, ROOT, Worker, wait_until
from .proj import REDIS_URL, events

TASK = "proj.fail_until_fixed"
Cli = Callable[..., subprocess.CompletedProcess[str]]

#: The app ``-A tests.deploy.e2e.test_admin_cli:cli_app`` names: the running test's client
#: app (its prefix and store), set by :func:`cli` for the commands run in this process.
cli_app: Any = None


def process(prefix: str, *args: str, program: list[str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Run ``celery-plus <args> -A tests.deploy.e2e.proj`` (or ``program <args>``) as a process
    on the test's store."""
    if program is None:
        command = [*CELERY_PLUS, *args, "-A", "tests.deploy.e2e.proj"]
    else:
        command = [*program, *args]
    env = {**os.environ, "PLUS_TEST_PREFIX": prefix}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, input="")


@pytest.fixture
def cli(client: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``celery-plus <args> -A <the test's app>`` in this process; ``input=`` is its stdin."""
    monkeypatch.setattr(sys.modules[__name__], "cli_app", client)

    def run(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(input))
        return celery_plus(capsys, *args, "-A", f"{__name__}:cli_app")

    return run


def cli_json(cli: Cli, *args: str, code: int = 0) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == code, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def _state(view: Backend, task_id: str) -> str | None:
    return (inspector_for(view).job(task_id) or {}).get("st")


def _dead_letter(client: Any, view: Backend, key: str) -> str:
    result = client.tasks[TASK].delay(key)
    wait_until(lambda: _state(view, result.id) == "failed", timeout=30,
               message=f"{key} dead-lettered")
    return str(result.id)


def _fix(prefix: str, key: str) -> None:
    store = redis.Redis.from_url(REDIS_URL)
    store.set(f"{prefix}:fixed:{key}", "1", ex=600)
    store.close()


def test_an_operator_lists_shows_and_retries_a_dead_letter(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        cli: Cli) -> None:
    start_worker()
    task_id = _dead_letter(client, view, "k1")

    listing = process(prefix, "dlq", "ls")  # the command itself, as a process
    assert listing.returncode == 0, listing.stderr
    header, row, footer = listing.stdout.splitlines()
    assert header.split() == ["TASK", "ID", "TASK", "QUEUE", "FAILED", "DL", "ERROR"]
    assert row.split()[:3] == [task_id, TASK, "celery"]
    assert row.endswith("RuntimeError: k1 is not fixed yet")
    assert footer == "page 1/1, 1 failed job"
    page = cli_json(cli, "dlq", "ls", "--task", TASK, "--text", "not fixed")
    assert [i["id"] for i in page["items"]] == [task_id] and page["total"] == 1
    assert page["items"][0]["exc_type"] == "RuntimeError"

    shown = cli("dlq", "show", task_id)
    assert shown.returncode == 0, shown.stderr
    assert f"Task id:      {task_id}" in shown.stdout
    assert 'Args:         ["k1"]' in shown.stdout
    assert "Traceback:" in shown.stdout and "RuntimeError: k1 is not fixed yet" in shown.stdout
    detail = cli_json(cli, "dlq", "show", task_id)
    assert detail["args"] == ["k1"] and detail["headers"]["task"] == TASK
    assert detail["traceback"].startswith("Traceback") and detail["unique_holder"] is None

    _fix(prefix, "k1")
    retried = cli("dlq", "retry", task_id)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == f"retried {task_id} (failed -> enqueued)"
    wait_until(lambda: _state(view, task_id) == "completed", timeout=30,
               message="the retried job completes")
    assert client.AsyncResult(task_id).get(timeout=10) == "k1"
    assert [e["key"] for e in events(prefix, "fixed")] == ["k1"]
    assert len(events(prefix, "attempt")) == 2
    outcomes = [h["outcome"] for h in json.loads((inspector_for(view).job(task_id) or {})["hist"])]
    assert outcomes[-1] == "admin retry" and "task failed" in outcomes

    again = cli("dlq", "retry", task_id)
    assert again.returncode == 0
    assert again.stdout.strip() == f"{task_id}: completed, not failed; nothing to retry"
    status = cli_json(cli, "store-status")
    assert status["dead_letters"] == 0 and status["counts"]["completed"] >= 1
    completed = cli_json(cli, "jobs", "completed")
    assert task_id in [i["id"] for i in completed["items"]]


def test_a_retry_conflict_and_a_confirmed_purge(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        cli: Cli) -> None:
    worker = start_worker()
    first = _dead_letter(client, view, "k2")
    second = _dead_letter(client, view, "k3")
    worker.stop()
    # With no worker running, a new job with the same arguments holds the unique key.
    holder = client.tasks[TASK].delay("k2")
    assert not holder.deduplicated and _state(view, holder.id) == "enqueued"

    conflict = cli("dlq", "retry", first)
    assert conflict.returncode == 1
    assert f"held by job '{holder.id}'" in conflict.stderr
    assert _state(view, first) == "failed"
    report = cli_json(cli, "dlq", "retry", first, code=1)
    assert report["errors"][0]["holder"] == holder.id

    status = cli("store-status")
    assert status.returncode == 0
    header, row = status.stdout.splitlines()[:2]
    counts = dict(zip(header.split(), row.split(), strict=False))
    assert counts == {**counts, "QUEUE": "celery", "ENQUEUED": "1", "SCHEDULED": "0",
                      "BLOCKED": "0", "RUNNING": "0", "RESERVED": "0", "FAILED": "2"}, counts
    assert "dead letters: 2" in status.stdout

    unscoped = cli("dlq", "purge")
    assert unscoped.returncode == 2 and "--all" in unscoped.stderr
    declined = cli("dlq", "purge", "--all", input="n\n")
    assert declined.returncode == 1 and "for good?" in declined.stderr
    assert _state(view, first) == "failed" and _state(view, second) == "failed"
    purged = cli("dlq", "purge", "--all", "--yes")
    assert purged.returncode == 0 and "purged 2 of 2 failed jobs" in purged.stdout
    assert inspector_for(view).job(first) is None and inspector_for(view).job(second) is None

    canceled = cli("cancel", holder.id)
    assert canceled.returncode == 0
    assert canceled.stdout.strip() == f"canceled {holder.id} (enqueued -> canceled)"
    assert inspector_for(view).holds() == {}

    # The same commands inside Celery's own CLI (a process: its entry point finds them).
    via_celery = process(prefix, "-A", "tests.deploy.e2e.proj", "plus", "jobs", "--json",
                         program=PLAIN_CELERY)
    assert via_celery.returncode == 0, via_celery.stderr
    assert json.loads(via_celery.stdout)["canceled"] == 1


def test_celery_plus_admin_serves_the_dashboard_on_localhost(
        prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``celery-plus admin`` (and its old name ``dashboard``) as a process, on Redis."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "admin.log"
    env = {**os.environ, "PLUS_TEST_PREFIX": prefix}
    with open(log, "wb") as out:
        proc = subprocess.Popen([*CELERY_PLUS, "admin", "-A", "tests.deploy.e2e.proj", "--port",
                                 str(port)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "celery-plus admin on" in log.read_text() or proc.poll() is not None,
                   timeout=30, message="the dashboard listens")
        first = log.read_text().splitlines()[0]
        assert first == (f"celery-plus admin on http://127.0.0.1:{port}/ (read-only, open to "
                         "anyone who reaches it; Ctrl+C to stop)"), log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/failed", timeout=30) as page:
            assert page.status == 200 and "0 jobs, page 1 of 1" in page.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    alias = celery_plus(capsys, "dashboard", "--help")
    assert alias.returncode == 0 and "--port" in alias.stdout


# -- the server (issue 14, defects 2 and 4) --------------------------------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _process(command: list[str], log: Path, ready: str, prefix: str, **extra_env: str
             ) -> Iterator[None]:
    env = {**os.environ, "PLUS_TEST_PREFIX": prefix, **extra_env}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: ready in log.read_text() or proc.poll() is not None, timeout=60,
                   message=f"{command[2]} listens")
        assert proc.poll() is None, log.read_text()
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


def test_silent_connections_do_not_stop_the_dashboard(prefix: str, tmp_path: Path) -> None:
    """One idle TCP connection used to block every page for 15 s+ (single-threaded wsgiref,
    no timeout, backlog 5): now 50 of them, a half-sent request and a negative
    Content-Length later, /metrics still answers at once."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    command = [*CELERY_PLUS, "admin", "-A", "tests.deploy.e2e.proj", "--port", str(port)]
    with _process(command, tmp_path / "admin.log", "celery-plus admin on", prefix), \
            contextlib.ExitStack() as silent:
        for _ in range(50):
            sock = silent.enter_context(socket.create_connection(("127.0.0.1", port), 10))
            assert sock  # connected, and says nothing
        half = silent.enter_context(socket.create_connection(("127.0.0.1", port), 10))
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        negative = silent.enter_context(socket.create_connection(("127.0.0.1", port), 10))
        negative.sendall(b"POST /job/x/retry HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: -1\r\n\r\n")
        started = time.monotonic()
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            assert response.status == 200
            assert b"celery_plus_jobs{" in response.read()
        assert time.monotonic() - started < 5
        negative.settimeout(10)
        assert negative.recv(100).startswith(b"HTTP/1.1 400")
        with urllib.request.urlopen(f"{base}/jobs/failed", timeout=10) as response:
            assert response.status == 200


GUNICORN_TOKEN = "Ru-5-fR2MxxnC3-fVOWws8pWER-soaHq"


def gunicorn_site() -> Any:
    """The site ``gunicorn 'tests.deploy.e2e.test_admin_cli:gunicorn_site()'`` serves: the
    dashboard mounted at /ops/celery, on the test's key prefix."""
    app = proj.make_app(os.environ["PLUS_TEST_PREFIX"], plus_admin_token=GUNICORN_TOKEN)
    return Mount(make_app(app), "/ops/celery")


def _store_dead_letter(backend: Backend, job_id: str) -> None:
    assert backend.publish(NewJob(id=job_id, queue="celery", message="{}",
                                  name="proj.fail")).accepted
    [claim] = backend.claim(["celery"], "w1", 1).claims
    backend.settle([Settle(job_id, claim.token, "fail", {
        "reason": "task failed", "exc_type": "RuntimeError", "exc_message": "boom"})])


def test_a_browser_acts_through_a_multi_process_server(prefix: str, tmp_path: Path) -> None:
    """``gunicorn -w 2`` serving the mount: a browser's 12 POSTs land on either process, and
    every one is accepted (the form token no longer differs per process)."""
    app = proj.make_app(prefix)
    ids = [f"g{n:02}" for n in range(12)]
    with connect(app) as admin:
        backend: Backend = admin.store.backend  # type: ignore[attr-defined]
        for job_id in ids:
            _store_dead_letter(backend, job_id)
    port = _free_port()
    base = f"http://127.0.0.1:{port}/ops/celery"
    access = tmp_path / "access.log"
    command = [sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}",
               "--timeout", "60", "--access-logfile", str(access),
               "--access-logformat", "%(p)s %(m)s %(U)s %(s)s",
               "tests.deploy.e2e.test_admin_cli:gunicorn_site()"]
    auth = "Basic " + base64.b64encode(f"op:{GUNICORN_TOKEN}".encode()).decode()
    with _process(command, tmp_path / "gunicorn.log", "Booting worker", prefix):
        wait_until(lambda: log_count(tmp_path / "gunicorn.log", "Booting worker") == 2,
                   timeout=60, message="two gunicorn workers")
        page = urllib.request.urlopen(urllib.request.Request(
            f"{base}/jobs/failed", headers={"Authorization": auth}), timeout=30)
        cookie = (page.headers["Set-Cookie"] or "").split(";", 1)[0]
        [token] = re.findall(r'name="token" value="([^"]+)"', page.read().decode())[:1]
        def post(job_id: str) -> str:
            request = urllib.request.Request(
                f"{base}/job/{job_id}/discard", data=urlencode({"token": token}).encode(),
                headers={"Authorization": auth, "Cookie": cookie,
                         "Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin",
                         "Connection": "close"})
            with urllib.request.urlopen(request, timeout=30) as response:  # follows the 303
                return response.read().decode()

        for job_id in ids:
            assert "discard: failed -&gt; discarded" in post(job_id)

        def posts() -> list[list[str]]:
            return [line.split() for line in access.read_text().splitlines() if " POST " in line]

        # Either process may take a connection: repeat (no-op) discards until both took some.
        for _ in range(100):
            if len({pid for pid, *_ in posts()}) == 2:
                break
            assert "nothing to discard" in post(ids[0])
        assert all(status == "303" for *_, status in posts()), posts()
        assert len({pid for pid, *_ in posts()}) == 2, "both gunicorn processes took POSTs"
    with connect(app) as admin:
        assert [admin.show(i).state for i in ids] == ["discarded"] * 12
    app.close()


def log_count(log: Path, text: str) -> int:
    return log.read_text().count(text)


DJANGO_TOKEN = "_aw6jRR4pD80f0YoA0KwYPDWPmEb1HsV"


def test_mounted_in_django_as_the_docs_say(prefix: str, tmp_path: Path) -> None:
    """docs/admin.md's Django recipe (``tests/deploy/e2e/django_admin_site.py`` runs it as written)
    served by a real server: every link, the cookie's Path and each redirect stay under the
    prefix, a browser's form posts, and ids with ``/`` and non-ASCII letters open."""
    app = proj.make_app(prefix)
    ids = ["d1", "été/1", "naïve-2"]
    with connect(app) as admin:
        backend: Backend = admin.store.backend  # type: ignore[attr-defined]
        for job_id in ids:
            _store_dead_letter(backend, job_id)
    port = _free_port()
    base = f"http://127.0.0.1:{port}/ops/celery"
    auth = "Basic " + base64.b64encode(f"op:{DJANGO_TOKEN}".encode()).decode()
    command = [sys.executable, "-m", "waitress", f"--listen=127.0.0.1:{port}",
               "tests.deploy.e2e.django_admin_site:application"]
    opener = urllib.request.build_opener(_NoRedirect)
    with _process(command, tmp_path / "django.log", "Serving on", prefix,
                  PLUS_TEST_ADMIN_TOKEN=DJANGO_TOKEN):
        with opener.open(urllib.request.Request(f"{base}/jobs/failed", headers={
                "Authorization": auth}), timeout=30) as page:
            cookie = page.headers["Set-Cookie"]
            html = page.read().decode()
        assert "; Path=/ops/celery;" in cookie, cookie
        hrefs = re.findall(r'(?:href|action)="([^"]+)"', html)
        assert hrefs and all(h.startswith("/ops/celery/") for h in hrefs), hrefs
        [token] = re.findall(r'name="token" value="([^"]+)"', html)[:1]
        for job_id in ids:
            path = f"/ops/celery/job/{quote(job_id, safe='')}"
            assert f'href="{path}"' in html, job_id
            with opener.open(urllib.request.Request(
                    f"http://127.0.0.1:{port}{path}", headers={"Authorization": auth}),
                    timeout=30) as page:
                assert page.status == 200 and f"job {job_id}" in page.read().decode(), job_id
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}{path}/discard", data=urlencode({"token": token}).encode(),
                headers={"Authorization": auth, "Cookie": cookie.split(";")[0],
                         "Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"})
            try:
                opener.open(request, timeout=30)
                raise AssertionError("no redirect")
            except urllib.error.HTTPError as exc:
                assert exc.code == 303, (job_id, exc.code, exc.read()[:300])
                assert exc.headers["Location"].startswith(f"{path}?msg=discard"), job_id
    with connect(app) as admin:
        assert [admin.show(i).state for i in ids] == ["discarded"] * 3
    app.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
