"""Issue 14, acceptance 2: every query parameter, form field, header and CLI option with
random, huge, negative, NUL, invalid UTF-8 and escape-laden values — never a 500, never a
traceback, never a hang.

The dashboard is called as a WSGI application (its ``wsgi.input`` refuses to be read past
what was sent, as a socket would block) on a SQLite, a Redis and a PostgreSQL store holding a
few jobs; the CLI through click's runner on SQLite, ``celery-plus admin`` included (its server
is created, not run). Every query parameter, form field and path the dashboard reads, and every
option of every admin command, is listed here (``test_the_lists_are_complete`` checks that
against the code). Hypothesis draws the values; each example
must answer within :data:`LIMIT_S`. The whole module runs in well under a minute.
"""

from __future__ import annotations

import functools
import io
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import pytest
from celery.bin.base import CLIContext
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import MAX_FORM_BYTES, Dashboard, make_app
from celery_plus.cli import admin as admin_cli
from celery_plus.cli import admin_ops, plus
from tests.fast.conformance.stores import PG_URL
from tests.fast.unit.test_admin_cli import REDIS_URL, Store, drop_store
from tests.stores.unit.test_admin_web import ADMIN_TOKEN

#: Longest an answer may take (a hang fails the example).
LIMIT_S = 5.0
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

NASTY = ["", "0", "-1", "-99999999999999999999", "99999999999999999999", "1e309", "nan",
         "inf", "1.5", "+7", " 3 ", "0x10", "\x00", "a\x00b", "%00", "\x1b[2J\x1b]0;pwned\x07",
         "\u202egnp.exe", "\ufeff", "\r\nSet-Cookie: x=y", "../../etc/passwd", "/", "//", ".",
         "..", "a/b", "<script>alert(1)</script>", "'; DROP TABLE jobs; --", "*", "%",
         "99999999999999999999d", "-5m", "1h30m", "9999-12-31T23:59:59", "0001-01-01",
         "2025-02-30", "all", "oldest", "newest", "failed", "x" * 100_000, "\udcff", "\ud800"]

values = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=40),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.binary(max_size=24).map(lambda b: b.decode("latin-1")),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x3000), max_size=20),
)
PARAMS = ("page", "per_page", "task", "queue", "text", "older_than", "since", "until", "search",
          "sort", "refresh", "range", "msg", "sig", "id", "raw", "select", "type", "message",
          "empty", "window", "ask", "top", "walk")
PATHS = ["/", "/jobs/failed", "/jobs/enqueued", "/jobs/completed", "/api/jobs/failed",
         "/api/status", "/api/throughput", "/api/activity", "/api/latency", "/failed",
         "/metrics", "/job", "/api/job", "/login", "/workers", "/api/workers", "/schedules",
         "/api/schedules", "/errors", "/errors/jobs", "/tasks", "/api/tasks", "/limits",
         "/api/limits", "/history", "/api/history"]


def encoded(value: str) -> str:
    """Percent-encoded as a client would send it (lone surrogates: invalid UTF-8 bytes)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


class Wire(io.BytesIO):
    """A request body as a socket gives it: reading past the end would block the server."""

    def read(self, size: int | None = -1) -> bytes:
        assert size is not None and 0 <= size <= len(self.getvalue()), (
            f"the dashboard read {size} bytes of a {len(self.getvalue())}-byte body")
        return super().read(size)


def announced(body: bytes, length: str | None) -> bytes:
    """The body a server hands the application for a ``Content-Length`` of plain digits
    (within the dashboard's limit): that many bytes (a client that sends fewer is cut off by
    the server before the application runs). Other values reach the application as they are,
    with the body sent."""
    text = (length or "").strip()
    if re.fullmatch(r"[0-9]{1,7}", text) and int(text) <= MAX_FORM_BYTES:
        return body.ljust(int(text), b"x")[:int(text)]
    return body


def request(web: Dashboard, method: str, path: str, query: str = "", body: bytes = b"",
            **headers: str) -> tuple[str, str]:
    body = announced(body, headers.get("CONTENT_LENGTH"))
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
        "SCRIPT_NAME": "", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80",
        "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http", "wsgi.input": Wire(body),
        "CONTENT_LENGTH": str(len(body)), "HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}",
        **headers}
    got: dict[str, str] = {}
    started = time.monotonic()
    data = b"".join(web(environ, lambda status, headers, exc_info=None: got.update(
        status=status)))
    assert time.monotonic() - started < LIMIT_S, f"{method} {path} took too long"
    return got["status"], data.decode("utf-8", "replace")


#: A Python traceback of the server's own (a job's page shows the job's traceback, which
#: the fuzz store's dead letters give without file lines).
SERVER_TRACEBACK = re.compile(r'File "[^"]+\.py", line \d+')


def check(status: str, text: str, what: str) -> None:
    assert not status.startswith("5"), (what, status, text[:300])
    assert not SERVER_TRACEBACK.search(text), what
    assert status.startswith("2") or "Traceback" not in text, what


@pytest.fixture(params=["sqlite", "redis", "postgres"], scope="module")
def web(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Dashboard]:
    schema = f"f{uuid.uuid4().hex[:10]}"
    broker = {"sqlite": f"plus+sqlite:///{tmp_path_factory.mktemp('fuzz') / 'store.db'}",
              "redis": f"plus+{REDIS_URL}", "postgres": f"plus+{PG_URL}"}[request.param]
    app = Celery("fuzz", broker=broker, set_as_current=False)
    app.conf.update(plus_pg_schema=schema, plus_key_prefix=schema,
                    plus_admin_token=ADMIN_TOKEN)
    with connect(app) as admin:
        store = Store(app, admin.store.backend)  # type: ignore[attr-defined]
        store.dead("dead-1", error="boom \x1b[2J", args=["\u202e"])
        store.dead("a/b")
        store.job("waiting-1")
    dashboard = make_app(app)
    with pytest.MonkeyPatch.context() as patch:
        # no worker runs here: Celery's remote control (asked on demand) answers at once,
        # with nobody (not after its 1 s wait), so the worker pages take any value quickly
        patch.setattr("celery_plus.admin.workers.ask", lambda admin, views, *args: views)
        yield dashboard
    dashboard.close()
    app.close()
    drop_store(request.param, schema)


@pytest.mark.long  # hypothesis, minutes over both stores: tests/run_long.sh
def test_every_query_parameter_with_every_nasty_value(web: Dashboard) -> None:
    """Each parameter alone with each of NASTY, on the listing, its JSON and a job page."""
    for name in PARAMS:
        for value in NASTY:
            query = f"{name}={encoded(value)}"
            for path in ("/jobs/failed", "/api/jobs/failed", "/job/dead-1", "/"):
                check(*request(web, "GET", path, query), f"GET {path} {query[:100]!r}")


@FUZZ
@given(path=st.one_of(st.sampled_from(PATHS), values.map(lambda v: "/job/" + v),
                      values.map(lambda v: "/jobs/" + v), values.map(lambda v: "/api/job/" + v)),
       params=st.dictionaries(st.sampled_from(PARAMS), values, max_size=5))
def test_every_query_parameter(web: Dashboard, path: str, params: dict[str, str]) -> None:
    query = "&".join(f"{k}={encoded(v)}" for k, v in params.items())
    path_info = path.encode("utf-8", "surrogatepass").decode("latin-1")
    check(*request(web, "GET", path_info, query), f"GET {path!r} {query[:200]!r}")


FORM_FIELDS = ("do", "id", "task", "queue", "older_than", "text", "since", "until", "search",
               "confirm", "token", "walk")
HEADERS = ("CONTENT_LENGTH", "HTTP_HOST", "HTTP_ORIGIN", "HTTP_COOKIE", "HTTP_AUTHORIZATION",
           "HTTP_SEC_FETCH_SITE")
#: Actions, each with a path segment that takes any value (an id, a node, an entry's name).
ACTION_PATHS = ("/job/{}/discard", "/job/{}/terminate", "/jobs/{}/bulk", "/workers/{}/stop",
                "/workers/{}/shutdown", "/schedules/{}/pause", "/schedules/{}/resume")


@FUZZ
@given(path=st.one_of(st.sampled_from(["/jobs/failed/bulk", "/jobs/enqueued/bulk",
                                       "/job/dead-1/retry", "/job/dead-1/terminate",
                                       "/job/retry", "/workers/x@y/stop"]),
                      st.tuples(st.sampled_from(ACTION_PATHS), values).map(
                          lambda pair: pair[0].format(pair[1]))),
       form=st.lists(st.tuples(st.sampled_from(FORM_FIELDS), values), max_size=6),
       headers=st.dictionaries(st.sampled_from(HEADERS), values, max_size=2))
def test_every_form_field_and_header(web: Dashboard, path: str, form: list[tuple[str, str]],
                                     headers: dict[str, str]) -> None:
    # Keep the job in place for the next example: confirmed destructive actions aside.
    form = [(k, v) for k, v in form if k != "confirm"]
    body = "&".join(f"{k}={encoded(v)}" for k, v in form).encode()
    status, text = request(web, "POST", path.encode("utf-8", "surrogatepass").decode("latin-1"),
                           "", body, **headers)
    check(status, text, f"POST {path!r} {form!r} {headers!r}"[:300])


@pytest.mark.long  # hypothesis, minutes over both stores: tests/run_long.sh
def test_every_form_field_and_header_with_every_nasty_value(web: Dashboard) -> None:
    for name in FORM_FIELDS:
        if name == "confirm":
            continue
        for value in NASTY:
            body = f"do=retry:selected&{name}={encoded(value)}".encode()
            check(*request(web, "POST", "/jobs/failed/bulk", "", body), f"{name}={value!r}")
    for header in HEADERS:
        for value in NASTY:
            status, text = request(web, "POST", "/job/dead-1/retry", "", b"x=1",
                                   **{header: value})
            check(status, text, f"{header}={value!r}")
    for path in ACTION_PATHS:
        for value in NASTY:
            where = path.format(value).encode("utf-8", "surrogatepass").decode("latin-1")
            check(*request(web, "POST", where, "", b""), f"POST {where[:100]!r}")


@pytest.mark.long  # hypothesis, minutes over both stores: tests/run_long.sh
def test_confirmed_bulk_actions_with_every_nasty_value(web: Dashboard) -> None:
    """The confirmed step (``confirm=1``) of a whole-filter action with each filter nasty (a
    retry, so that nothing is deleted: a value matching the dead letters retries them, and the
    fuzz store keeps them as jobs)."""
    for name in ("task", "queue", "older_than", "text", "since", "until", "search", "id"):
        for value in NASTY:
            if not value:
                continue  # (no filter at all: every dead letter, a case of its own)
            body = f"do=retry:scope&confirm=1&{name}={encoded(value)}".encode()
            check(*request(web, "POST", "/jobs/failed/bulk", "", body), f"{name}={value!r}")


# -- the CLI ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    app = Celery("fuzz-cli", broker=f"plus+sqlite:///{tmp_path_factory.mktemp('cli') / 's.db'}",
                 set_as_current=False)
    with connect(app) as admin:
        store = Store(app, admin.store.backend)  # type: ignore[attr-defined]
        store.dead("dead-1", task="proj.\x1b]0;pwned\x07", error="\x1b[2J\u202e")
        yield store
    app.close()


@pytest.fixture(scope="module", autouse=True)
def no_serving() -> Iterator[None]:
    """``celery-plus admin`` creates its server (and refuses what waitress refuses) but neither
    binds nor serves: it returns at once."""
    from waitress import server

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server, "create_server",
                      functools.partial(server.create_server, _start=False))
        patch.setattr(server.BaseWSGIServer, "run", lambda self: None)
        patch.setattr(server.MultiSocketServer, "run", lambda self: None)
        yield


COMMANDS = [["dlq", "ls"], ["jobs"], ["jobs", "failed"], ["dlq", "show"], ["dlq", "retry"],
            ["dlq", "discard"], ["dlq", "purge"], ["cancel"], ["store-status"], ["schedules", "ls"],
            ["schedules", "pause"], ["schedules", "resume"], ["schedules", "rm"], ["admin"]]
#: Each option that takes a value, and a command that has it.
OPTION_COMMANDS = {
    "--page": ["dlq", "ls"], "--per-page": ["dlq", "ls"], "--since": ["dlq", "ls"],
    "--until": ["dlq", "ls"], "--task": ["dlq", "ls"], "--queue": ["dlq", "ls"],
    "--text": ["dlq", "ls"], "--text-limit": ["dlq", "ls"], "--walk-limit": ["dlq", "ls"],
    "--sort": ["dlq", "ls"],
    "--older-than": ["dlq", "purge"],
    "--state": ["dlq", "purge"], "--host": ["admin"], "--port": ["admin"],
    "--allowed-host": ["admin"], "--trusted-proxy": ["admin"], "--limit": ["dlq", "groups"],
    # (no --yes and no terminal: the confirmation declines, nothing is discarded)
    "--type": ["dlq", "discard-group", "--message", "m"],
    "--message": ["dlq", "discard-group", "--type", "T"], "--window": ["tasks"],
    "--range": ["queues", "history"],
    # (no --yes and no terminal: the confirmation declines, nothing is retried)
    "--deadline": ["bulk", "retry", "failed"]}
OPTIONS = list(OPTION_COMMANDS)
FLAGS = ["--json", "--yes", "--all"]


def test_the_lists_are_complete() -> None:
    """Every option of every admin command is fuzzed, and so is every query parameter and
    form field the dashboard reads (found in its code)."""
    from celery_plus.admin import pages

    seen: set[str] = set()
    for command in (*admin_cli.COMMANDS, *admin_ops.COMMANDS):
        subcommands = getattr(command, "commands", {"": command})
        for sub in subcommands.values():
            for param in sub.params:
                if isinstance(param, click.Option):
                    seen.update(n for n in param.opts[:1] if n.startswith("--"))
    assert seen - {"--help"} <= set(OPTIONS) | set(FLAGS), sorted(seen - set(OPTIONS))
    assert set(pages.FILTER_FIELDS) <= set(PARAMS) & set(FORM_FIELDS)
    web_source = Path(admin_cli.__file__).parent.parent.joinpath("admin", "web.py").read_text()
    read = set(re.findall(r'(?:query|form)(?:\.get)?[\[(]"(\w+)"', web_source))
    assert read and read <= set(PARAMS) | set(FORM_FIELDS), sorted(
        read - set(PARAMS) - set(FORM_FIELDS))


@pytest.mark.long  # hypothesis, minutes over both stores: tests/run_long.sh
def test_every_cli_option_with_every_nasty_value(cli_store: Store) -> None:
    obj = CLIContext(app=cli_store.app, no_color=True, workdir=None, quiet=False)
    for option, command in OPTION_COMMANDS.items():
        for value in NASTY:
            args = [*command, option, value]
            result = CliRunner().invoke(plus, args, obj=obj, input="n\n")
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                args, result.exception)
            assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
            assert "Traceback" not in result.output and "\x1b" not in result.output, args


@FUZZ
@given(command=st.sampled_from(COMMANDS),
       options=st.lists(st.tuples(st.sampled_from(OPTIONS), values), max_size=4),
       arguments=st.lists(values, max_size=2), flags=st.sets(st.sampled_from(FLAGS), max_size=3))
def test_every_cli_option(cli_store: Store, command: list[str],
                          options: list[tuple[str, str]], arguments: list[str],
                          flags: set[str]) -> None:
    if "--all" in flags:  # keep the dead letter for the next examples
        flags.discard("--yes")
    args = [*command, *(x for pair in options for x in pair), *sorted(flags), *arguments]
    obj = CLIContext(app=cli_store.app, no_color=True, workdir=None, quiet=False)
    started = time.monotonic()
    result = CliRunner().invoke(plus, args, obj=obj, input="n\n")
    assert time.monotonic() - started < LIMIT_S, args
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, result.exception)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output[-300:])
    assert "Traceback" not in result.output, args
    assert "\x1b" not in result.output and "\u202e" not in result.output, (
        args, result.output[-300:])
