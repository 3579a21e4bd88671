"""The PostgreSQL store's function files (``stores/postgres/functions``) and their applier.

The schema's final state must not depend on the layout: a schema built by this version's
migrations + function files, one built by the legacy migrations (``fixtures/postgres_legacy``:
0001-0008 as they were up to commit a9f6d7c, every function in them, restated by later ones)
and one of those upgraded by this version all have the same functions (``pg_get_functiondef``),
triggers, columns, indexes, constraints and sequences. A function lost in the move, or left
at an earlier version, fails :func:`test_fresh_and_upgraded_schemas_equal_the_legacy_one`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from celery_plus.model import rules
from celery_plus.model.store import Settle
from celery_plus.stores.postgres import migrations as pg_migrations
from celery_plus.stores.postgres.backend import PostgresBackend
from tests.fast.conformance.stores import PG_URL
from tests.fast.conformance.support import claim, publish, record
from tests.support import celery_plus, wait_until

LEGACY = Path(__file__).parent / "fixtures" / "postgres_legacy"
BOOKKEEPING = ("schema_migrations", "function_versions")


# -- static rules of the files ---------------------------------------------------------------

_CREATE_RE = re.compile(r"^CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|TRIGGER|VIEW)\s+(\w+)",
                        re.M | re.I)


def test_every_function_file_replaces_in_place_and_no_migration_defines_a_function() -> None:
    files = pg_migrations.function_files()
    assert len(files) >= 50
    for file in files:
        creates = _CREATE_RE.findall(file.sql)
        assert creates, f"{file.name}.sql defines nothing"
        for replace, kind, name in creates:
            # A trigger is dropped first instead (CREATE OR REPLACE TRIGGER needs PG 14).
            dropped = re.search(rf"DROP\s+{kind}\s+IF\s+EXISTS\s+{name}\b", file.sql, re.I)
            assert replace or dropped, \
                f"{file.name}.sql: CREATE {kind} {name} cannot be applied again"
        assert file.name in {name for _, _, name in creates}, \
            f"{file.name}.sql does not define {file.name}"
    for migration in pg_migrations.migrations():
        assert not _CREATE_RE.search(migration.sql), \
            f"migration {migration.version:04d} defines a function: move it to functions/"


def test_each_function_is_defined_in_one_file_only() -> None:
    seen: dict[str, str] = {}
    for file in pg_migrations.function_files():
        for _, kind, name in _CREATE_RE.findall(file.sql):
            if kind.upper() == "FUNCTION":
                assert seen.setdefault(name, file.name) == file.name, (name, seen[name], file.name)


# -- schemas built three ways ----------------------------------------------------------------


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        yield connection


@pytest.fixture
def new_schema(conn: psycopg.Connection[Any]) -> Iterator[Callable[[str], str]]:
    """Names fresh schemas (``<prefix><random>``), all dropped afterwards."""
    made: list[str] = []

    def make(prefix: str) -> str:
        made.append(f"{prefix}{os.urandom(5).hex()}")
        return made[-1]

    yield make
    for schema in made:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def legacy_migrations(upto: int = 8) -> list[tuple[int, str, str]]:
    """(version, name, sql) of the legacy migrations, those up to ``upto``."""
    found = []
    for path in sorted(LEGACY.glob("*.sql")):
        version, _, name = path.stem.partition("_")
        if int(version) <= upto:
            found.append((int(version), name, path.read_text()))
    return found


def build_legacy(conn: psycopg.Connection[Any], schema: str, upto: int = 8) -> None:
    """The schema as the legacy migrator left it at version ``upto``."""
    conn.execute(f'CREATE SCHEMA "{schema}"')
    conn.execute(f'CREATE TABLE "{schema}".schema_migrations (version integer PRIMARY KEY, '
                 "name text NOT NULL, applied_at timestamptz NOT NULL "
                 "DEFAULT clock_timestamp())")
    for version, name, sql in legacy_migrations(upto):
        with conn.transaction():
            conn.execute(f'SET LOCAL search_path TO "{schema}"')
            conn.execute(sql)
            conn.execute(f'INSERT INTO "{schema}".schema_migrations (version, name) '
                         "VALUES (%s, %s)", [version, name])


def catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """Every definition in ``schema`` (bookkeeping tables aside), the schema's name blanked."""
    queries = {
        "function": "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) "
                    "|| ')', pg_get_functiondef(p.oid) FROM pg_proc p "
                    "WHERE p.pronamespace = %(ns)s::regnamespace",
        "trigger": "SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c "
                   "ON c.oid = t.tgrelid WHERE c.relnamespace = %(ns)s::regnamespace "
                   "AND NOT t.tgisinternal",
        "column": "SELECT table_name || '.' || column_name, concat_ws(' ', ordinal_position, "
                  "data_type, is_nullable, column_default) FROM information_schema.columns "
                  "WHERE table_schema = %(ns)s",
        "index": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(ns)s",
        "constraint": "SELECT c.conrelid::regclass || '.' || c.conname, "
                      "pg_get_constraintdef(c.oid) FROM pg_constraint c "
                      "WHERE c.connamespace = %(ns)s::regnamespace",
        "relation": "SELECT c.relname, c.relkind::text || coalesce(pg_get_viewdef(c.oid), '') "
                    "FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace",
    }
    out: dict[str, str] = {}
    for kind, sql in queries.items():
        for key, definition in conn.execute(sql, {"ns": schema}).fetchall():
            if not any(table in key for table in BOOKKEEPING):
                out[f"{kind} {key.replace(schema, '<schema>')}"] = \
                    definition.replace(schema, "<schema>")
    return out


def functions_of(snapshot: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in snapshot.items() if key.startswith("function ")}


#: Definitions changed on purpose since the legacy layout (each with its reason); every other one
#: must be the legacy one, and the changed ones must be the same on a fresh and an upgraded store.
CHANGED_SINCE_LEGACY = {
    # release 2: a heartbeat no longer revives a lapsed rate claim (tests/fast/model found it);
    # release 5: the ids of the claims heartbeat_verdicts() does not renew.
    "function heartbeat(p_ids text[], p_tokens bigint[], p_lease_ms bigint)",
    # release 3: a start is stamped once the rate group's lock is held (the long run found it).
    "function rate_start(p_id text, p_token bigint)",
    # release 4: an attempt names its claim's token (a claim its run continued stays known as
    # continued once the continuation is claimed: a heartbeat's verdict, rules.py).
    "function attempt_entry(p_id text, p_outcome text, p_detail jsonb, p_now bigint)",
    # release 5: the rules' constants read from rules.sql (rendered from model/rules.py), the
    # slot and hold rules from take_slot() / take_hold(window): same behaviour, stated once.
    "function admin_cancel(p_id text)",
    "function admin_purge(p_state text, p_ids text[], p_task text, p_queue text, p_older bigint)",
    "function admin_retry(p_ids text[], p_task text, p_queue text, p_older bigint, "
    "p_backstop bigint)",
    "function claim(p_queues text[], p_worker text, p_max integer, p_scan_limit integer, "
    "p_lease_ms bigint, p_backstop bigint, p_ids text[], p_tokens bigint[], p_actions text[], "
    "p_details text[])",
    "function claim_job(p_id text, p_worker text, p_lease_ms bigint, p_backstop bigint, "
    "OUT o_outcome text, OUT o_state text, OUT o_token bigint, OUT o_deliveries integer, "
    "OUT o_lease_left bigint)",
    "function push_history(p_id text, p_entry jsonb)",
    "function renew_holds(p_batch integer, p_backstop bigint, p_waiting boolean)",
    "function publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer, "
    "p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text, p_limit integer, "
    "p_mdl integer, p_backstop bigint, p_continues bigint, OUT o_holder text, "
    "OUT o_state text, OUT o_continued boolean, OUT o_fenced boolean)",
    # release 5: the 13-argument publish() of 0001 is fenced like the others (the 14-argument
    # one with no token; a refused publish raises): docs/postgres.md.
    "function publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer, "
    "p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text, p_limit integer, "
    "p_mdl integer, p_backstop bigint, OUT o_holder text, OUT o_state text, "
    "OUT o_continued boolean)",
    # release 7: the settles' and heartbeats' forms without start marks answer from the forms
    # with them (docs/admin.md "Reserved and running"), for workers of earlier releases;
    # settle() finds the rows it locks by id alone (not through jobs_leases, whose bitmap
    # scan read every entry left since the last VACUUM: a drain slowed as it went).
    "function settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[], "
    "p_backstop bigint)",
    # release 7: the 17-argument publish() writes the rate fields only when there are some to
    # write or clear (no second row version per publish).
    "function publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer, "
    "p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text, p_limit integer, "
    "p_mdl integer, p_backstop bigint, p_continues bigint, p_rate_group text, "
    "p_rate_limit integer, p_rate_window bigint, OUT o_holder text, OUT o_state text, "
    "OUT o_continued boolean, OUT o_fenced boolean)",
}
#: Definitions added since the legacy layout (a fresh and an upgraded store have them alike).
ADDED_SINCE_LEGACY = {
    # release 5: model/rules.py's constants, rendered (functions/rules.sql) ...
    "function priority_factor()", "function history_max()", "function waiting_states()",
    "function finished_states()", "function rules()",
    # ... and the slot and hold rules as primitives every function calls.
    "function take_slot(p_id text, p_group text, p_limit integer, p_park boolean)",
    "function take_hold(p_lock text, p_id text, p_window text, p_ttl bigint, p_until bigint, "
    "p_now bigint)",
    # release 5: a heartbeat says what became of each claim it does not renew (ended by its
    # own run, or lost), in the same step; heartbeat() answers from it for earlier releases.
    "function heartbeat_verdicts(p_ids text[], p_tokens bigint[], p_lease_ms bigint)",
    # release 6 (migration 0009): paused queues (admin pause / resume); claim() skips them.
    "function queue_pause(p_queue text, p_paused boolean)",
    "function pause_lock(p_queue text, p_exclusive boolean)",
    "relation paused_queues", "relation paused_queues_pkey", "index paused_queues_pkey",
    "column paused_queues.queue", "column paused_queues.paused_ms",
    "constraint <schema>.paused_queues.paused_queues_pkey",
    # migration 0010: the admin's dead letters grouped by error (an expression index).
    "index jobs_error_groups", "relation jobs_error_groups",
    # release 7 (migration 0011): the worker's start marks, carried by heartbeats and settles.
    "column jobs.start_mark",
    "function mark_start(p_id text, p_token bigint, p_mark bigint, p_now bigint)",
    "function settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[], "
    "p_backstop bigint, p_run_ms bigint[])",
    "function heartbeat_verdicts(p_ids text[], p_tokens bigint[], p_lease_ms bigint, "
    "p_starts bigint[])",
    "function claim(p_queues text[], p_worker text, p_max integer, p_scan_limit integer, "
    "p_lease_ms bigint, p_backstop bigint, p_ids text[], p_tokens bigint[], p_actions text[], "
    "p_details text[], p_run_ms bigint[])",
    # release 10: the start mark's rule as expressions, for mark_start() and settle()'s ack.
    "function marked_start(p_started bigint, p_start_mark bigint, p_token bigint, "
    "p_mark bigint, p_now bigint)",
    "function marked_token(p_start_mark bigint, p_token bigint, p_mark bigint)",
    # migration 0012: the Celery workers' own records (the admin's workers page).
    "relation workers", "relation workers_pkey", "index workers_pkey", "column workers.node",
    "column workers.info", "column workers.started_ms", "column workers.at_ms",
    "constraint <schema>.workers.workers_pkey",
    # migration 0013: the admin's queue history (a sample a minute, kept a day).
    "relation queue_history", "relation queue_history_pkey", "index queue_history_pkey",
    "column queue_history.bucket_ms", "column queue_history.at_ms", "column queue_history.sample",
    "constraint <schema>.queue_history.queue_history_pkey",
    # migration 0014: the admin's indexes at scale (a task's enqueued jobs, dead letters by
    # queue).
    "index jobs_ready_by_name", "relation jobs_ready_by_name",
    "index jobs_failed_by_queue", "relation jobs_failed_by_queue",
    "index jobs_failed_by_name", "relation jobs_failed_by_name",
    # release 7: a batch publish in one statement (publish_many).
    "function publish_batch(p_ids text[], p_queues text[], p_msgs bytea[], p_names text[], "
    "p_priorities integer[], p_etas bigint[], p_locks text[], p_windows text[], "
    "p_ttls bigint[], p_groups text[], p_limits integer[], p_mdls integer[], "
    "p_backstop bigint, p_continues bigint[], p_rate_groups text[], "
    "p_rate_limits integer[], p_rate_windows bigint[])",
    # release 8: the settle action defer (a requeue scheduled after a growing back-off).
    "function defer_ms(p_deliveries integer)", "function schedule(p_id text, p_due bigint)",
}


def test_fresh_and_upgraded_schemas_equal_the_legacy_one(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    legacy, fresh, upgraded = new_schema("lg"), new_schema("fr"), new_schema("ug")
    build_legacy(conn, legacy)
    build_legacy(conn, upgraded)
    pg_migrations.migrate(conn, fresh)
    pg_migrations.migrate(conn, upgraded)
    expected = catalog(conn, legacy)
    assert len(functions_of(expected)) == 57
    fresh_catalog = catalog(conn, fresh)
    for schema in (fresh, upgraded):
        got = catalog(conn, schema)
        assert sorted(set(expected) ^ set(got)) == sorted(ADDED_SINCE_LEGACY)
        assert all(got[key] == fresh_catalog[key] for key in ADDED_SINCE_LEGACY)
        differ = sorted(key for key in expected if expected[key] != got[key])
        assert differ == sorted(CHANGED_SINCE_LEGACY), differ
        assert all(got[key] == fresh_catalog[key]
                   for key in CHANGED_SINCE_LEGACY | ADDED_SINCE_LEGACY)


def test_a_legacy_store_upgrades_in_place_and_its_jobs_carry_on(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """The legacy 0001-0008 applied, a job published and claimed; then this version:
    no migration to apply, every function file applied and recorded, the job settles."""
    schema = new_schema("ul")
    build_legacy(conn, schema)
    with conn.transaction():
        conn.execute(f'SET LOCAL search_path TO "{schema}"')
        conn.execute("SELECT * FROM publish('old', 'jobs', 'm', '', 0, 0, '', '', 0, '', 0, "
                     "0, 1000, 0, NULL, NULL, NULL)")
        token = conn.execute("SELECT o_token FROM claim(ARRAY['jobs'], 'w0', 1, 10, 60000, "
                             "1000, NULL, NULL, NULL, NULL) WHERE o_kind = 'c'").fetchone()
    assert token is not None
    applied = pg_migrations.migrate(conn, schema)
    assert [m.version for m in applied.migrations] == [9, 10, 11, 12, 13, 14]
    assert [f.name for f in applied.functions] == [f.name for f in pg_migrations.function_files()]
    recorded = dict(conn.execute(f'SELECT name, sha256 FROM "{schema}".function_versions'))
    assert recorded == {f.name: f.sha256 for f in pg_migrations.function_files()}
    store = PostgresBackend(PG_URL, schema=schema)
    try:
        assert store.heartbeat([("old", token[0])]) == ["renewed"]
        publish(store, "new")
        assert [c.job_id for c in claim(store).claims] == ["new"]
        assert record(store, "old").state == "running"
    finally:
        store.close()


def test_the_heartbeat_of_earlier_releases_names_the_claims_it_did_not_renew(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """A process of a release before heartbeat_verdicts() (a rolling upgrade) calls
    heartbeat(): it still gets the ids of the claims not renewed, ended or lost, in order."""
    schema = new_schema("hb")
    pg_migrations.migrate(conn, schema)
    store = PostgresBackend(PG_URL, schema=schema)
    try:
        for name in ("a", "b", "c"):
            publish(store, name)
        tokens = {c.job_id: c.token for c in claim(store).claims}
        store.settle([Settle("b", tokens["b"], "ack")])
        rows = conn.execute(
            f'SELECT * FROM "{schema}".heartbeat(%s::text[], %s::bigint[], 60000)',
            [["nope", "a", "b", "c"], [1, tokens["a"], tokens["b"], tokens["c"] + 1]])
        assert rows.fetchall() == [("nope",), ("b",), ("c",)]
        assert store.heartbeat([("a", tokens["a"]), ("b", tokens["b"])]) == [
            "renewed", "ended"]
    finally:
        store.close()


def test_only_changed_function_files_are_applied_again(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    schema = new_schema("ch")
    assert len(pg_migrations.migrate(conn, schema).functions) >= 50
    assert pg_migrations.migrate(conn, schema) == pg_migrations.Applied()
    # As if heartbeat.sql had changed since it was applied: a stale hash, a stale body.
    conn.execute(f'UPDATE "{schema}".function_versions SET sha256 = %s WHERE name = %s',
                 ["0" * 64, "heartbeat"])
    conn.execute(f'CREATE OR REPLACE FUNCTION "{schema}".heartbeat(p_ids text[], '
                 "p_tokens bigint[], p_lease_ms bigint) RETURNS SETOF text "
                 "LANGUAGE sql AS $$ SELECT 'stale' $$")
    states = {s.name: s.state for s in pg_migrations.function_status(conn, schema)}
    assert states["heartbeat"] == "changed" and states["claim"] == "current"
    applied = pg_migrations.migrate(conn, schema)
    assert applied.migrations == [] and [f.name for f in applied.functions] == ["heartbeat"]
    assert conn.execute(f'SELECT count(*) FROM "{schema}".heartbeat(ARRAY[\'x\'], '
                        "ARRAY[1::bigint], 1000)").fetchone() == (1,)
    assert {s.state for s in pg_migrations.function_status(conn, schema)} == {"current"}


def test_a_store_migrated_to_0003_upgrades_with_tokens_above_every_issued_one(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """The legacy 0001-0003 applied, then this version: migrations 0004-0008 and every function
    file; the token sequence starts above the tokens already issued, and the 13-argument
    publish() of 0001 stays for processes not yet upgraded."""
    schema = new_schema("up")
    build_legacy(conn, schema, upto=3)
    with conn.transaction():
        conn.execute(f'SET LOCAL search_path TO "{schema}"')
        conn.execute("SELECT * FROM publish('old', 'jobs', 'm', '', 0, 0, '', '', 0, "
                     "'', 0, 0, 1000)")
        conn.execute("UPDATE jobs SET token = 77 WHERE id = 'old'")
    applied = pg_migrations.migrate(conn, schema)
    assert [m.version for m in applied.migrations] == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    store = PostgresBackend(PG_URL, schema=schema)
    try:
        publish(store, "new")
        got = {c.job_id: c.token for c in claim(store).claims}
        assert got["old"] > 77 and got["new"] > 77 and got["old"] != got["new"]
        publish_arities = {row[0] for row in conn.execute(
            "SELECT p.pronargs FROM pg_proc p WHERE p.pronamespace = %s::regnamespace "
            "AND p.proname = 'publish'", [schema])}
        assert publish_arities == {13, 14, 17}
    finally:
        store.close()


def test_db_status_lists_pending_function_files(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str],
        capsys: pytest.CaptureFixture[str]) -> None:
    schema = new_schema("st")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return celery_plus(capsys, "db", *args, "--url", PG_URL, "--schema", schema)

    new = run("status")
    count = len(pg_migrations.function_files())
    assert new.returncode == 1 and f"functions/*.sql  pending ({count} files)" in new.stdout
    pg_migrations.migrate(conn, schema)
    conn.execute(f'UPDATE "{schema}".function_versions SET sha256 = %s WHERE name = %s',
                 ["0" * 64, "settle"])
    before = run("status")
    assert before.returncode == 1, before.stdout + before.stderr
    assert "functions/settle.sql  changed" in before.stdout
    assert "functions/claim.sql" not in before.stdout  # current files are only counted
    migrated = run("migrate")
    assert "applied functions/settle.sql" in migrated.stdout, migrated.stderr
    after = run("status")
    assert after.returncode == 0 and "changed" not in after.stdout
    assert f"functions: {count} of {count} files current" in after.stdout


def test_a_changed_return_type_needs_the_files_drop_and_a_failing_file_applies_nothing(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CREATE OR REPLACE cannot change a return type: without its DROP the file fails, and the
    whole batch rolls back (claim.sql, applied before it, is not recorded either)."""
    schema = new_schema("sg")
    pg_migrations.migrate(conn, schema)
    shipped = {f.name: f for f in pg_migrations.function_files()}
    recorded = dict(conn.execute(f'SELECT name, sha256 FROM "{schema}".function_versions'))
    new_heartbeat = ("CREATE OR REPLACE FUNCTION heartbeat(p_ids text[], p_tokens bigint[], "
                     "p_lease_ms bigint) RETURNS integer LANGUAGE sql AS $$ SELECT 7 $$;\n")
    drop = "DROP FUNCTION IF EXISTS heartbeat(text[], bigint[], bigint);\n"

    def ship(heartbeat_sql: str) -> None:
        files = {**shipped, "claim": pg_migrations.FunctionFile(
                     "claim", shipped["claim"].sql + "-- reworded\n"),
                 "heartbeat": pg_migrations.FunctionFile("heartbeat", heartbeat_sql)}
        monkeypatch.setattr(pg_migrations, "function_files",
                            lambda: sorted(files.values(), key=lambda f: f.name))

    ship(new_heartbeat)
    with pytest.raises(psycopg.errors.InvalidFunctionDefinition):
        pg_migrations.migrate(conn, schema)
    assert dict(conn.execute(f'SELECT name, sha256 FROM "{schema}".function_versions')) \
        == recorded
    ship(drop + new_heartbeat)
    applied = pg_migrations.migrate(conn, schema)
    assert [f.name for f in applied.functions] == ["claim", "heartbeat"]
    assert conn.execute(f'SELECT "{schema}".heartbeat(\'{{}}\', \'{{}}\', 1)').fetchone() == (7,)
    assert pg_migrations.migrate(conn, schema) == pg_migrations.Applied()


# -- rolling upgrades --------------------------------------------------------------------------

MANIFEST = Path(__file__).parent / "fixtures" / "postgres_functions.json"


def test_the_release_is_raised_whenever_a_function_file_changes() -> None:
    manifest = json.loads(MANIFEST.read_text())
    now = {f.name: f.sha256 for f in pg_migrations.function_files()}
    changed = sorted(name for name in now.keys() | manifest["sha256"].keys()
                     if now.get(name) != manifest["sha256"].get(name))
    fresh = json.dumps({"release": pg_migrations.FUNCTIONS_RELEASE, "sha256": now},
                       indent=1, sort_keys=True)
    assert not changed or manifest["release"] < pg_migrations.FUNCTIONS_RELEASE, (
        f"function files changed ({', '.join(changed)}): raise FUNCTIONS_RELEASE in "
        f"stores/postgres/migrations.py, then write {MANIFEST.name} anew")
    assert not changed and manifest["release"] == pg_migrations.FUNCTIONS_RELEASE, (
        f"write {MANIFEST} anew:\n{fresh}")


def test_a_process_of_an_older_release_never_puts_its_bodies_back(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    schema = new_schema("rel")
    pg_migrations.migrate(conn, schema)
    # As if the next release had applied a heartbeat.sql of its own.
    conn.execute(f'UPDATE "{schema}".function_versions SET sha256 = %s, release = %s '
                 "WHERE name = 'heartbeat'", ["f" * 64, pg_migrations.FUNCTIONS_RELEASE + 1])
    conn.execute(f'CREATE OR REPLACE FUNCTION "{schema}".heartbeat(p_ids text[], '
                 "p_tokens bigint[], p_lease_ms bigint) RETURNS SETOF text "
                 "LANGUAGE sql AS $$ SELECT 'next release' $$")
    assert pg_migrations.migrate(conn, schema) == pg_migrations.Applied()
    assert conn.execute(f'SELECT * FROM "{schema}".heartbeat(ARRAY[\'x\'], '
                        "ARRAY[1::bigint], 1000)").fetchall() == [("next release",)]
    states = {s.name: s.state for s in pg_migrations.function_status(conn, schema)}
    assert states["heartbeat"] == "newer" and states["claim"] == "current"


def test_every_version_takes_the_same_migration_lock(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    # The key earlier versions lock: a migrator of this version must wait for one of theirs.
    schema = new_schema("lk")
    build_legacy(conn, schema, upto=3)
    key = f"celery_plus.migrate:{schema}"
    conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
    done: list[pg_migrations.Applied] = []
    with psycopg.connect(PG_URL, autocommit=True) as other:
        pid = other.info.backend_pid
        migrator = threading.Thread(target=lambda: done.append(
            pg_migrations.migrate(other, schema)))
        migrator.start()
        try:
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' "
                "AND NOT granted", [pid]).fetchone() == (1,), timeout=10,
                message="the migrator waiting for the earlier version's lock")
            assert not done
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
            migrator.join(60)
    assert [m.version for m in done[0].migrations] == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


# -- the rules, rendered -------------------------------------------------------------------------


def test_the_rendered_constants_equal_the_rules(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """functions/rules.sql's functions return model/rules.py's values (rendered, not retyped)."""
    schema = new_schema("ru")
    pg_migrations.migrate(conn, schema)
    got = conn.execute(f'SELECT "{schema}".priority_factor(), "{schema}".history_max(), '
                       f'"{schema}".waiting_states(), "{schema}".finished_states(), '
                       f'"{schema}".rules()').fetchone()
    assert got is not None
    factor, history, waiting, finished, named = got
    assert factor == rules.PRIORITY_FACTOR and history == rules.HISTORY_MAX
    assert tuple(waiting) == rules.WAITING and tuple(finished) == rules.FINISHED
    assert named == {name: list(value) if isinstance(value, tuple) else value
                     for name, value in rules.RENDERED.items()}


def test_a_placeholder_is_rendered_from_the_rules_or_refused() -> None:
    assert pg_migrations.render_rules("SELECT {{PRIORITY_FACTOR}}, {{FINISHED}}") == (
        f"SELECT {rules.PRIORITY_FACTOR}, "
        f"ARRAY[{', '.join(repr(s) for s in rules.FINISHED)}]")
    with pytest.raises(ValueError, match="NOPE"):
        pg_migrations.render_rules("SELECT {{NOPE}}")
    shipped = {f.name: f.sql for f in pg_migrations.function_files()}
    assert not any("{{" in sql for sql in shipped.values())


def test_the_13_argument_publish_is_fenced_like_the_others(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """The 0001 form (processes before the fences) carries no lease token: it publishes new and
    finished ids as the current form does, and refuses, loudly, to take over a running job."""
    schema = new_schema("p13")
    pg_migrations.migrate(conn, schema)
    old = (f'SELECT * FROM "{schema}".publish(%s, \'jobs\', \'m\', \'\', 0, 0, \'\', \'\', 0, '
           "'', 0, 0, 1000)")
    assert conn.execute(old, ["a"]).fetchone() == (None, "enqueued", False)
    claimed = conn.execute(f'SELECT o_id, o_token FROM "{schema}".claim(ARRAY[\'jobs\'], '
                           "'w0', 1, 10, 60000, 1000, NULL, NULL, NULL, NULL) "
                           "WHERE o_kind = 'c'").fetchall()
    assert [row[0] for row in claimed] == ["a"]
    with pytest.raises(psycopg.errors.RaiseException, match="fenced"):
        conn.execute(old, ["a"])
    state = conn.execute(f'SELECT state, token FROM "{schema}".jobs WHERE id = \'a\'').fetchone()
    assert state == ("running", claimed[0][1])
    # Settled by its claim, the job is finished: published anew, as by any process.
    conn.execute(f'SELECT * FROM "{schema}".settle(ARRAY[\'a\'], ARRAY[%s::bigint], '
                 "ARRAY['ack'], ARRAY[NULL::text], 1000)", [claimed[0][1]])
    assert conn.execute(old, ["a"]).fetchone() == (None, "enqueued", False)


def test_the_call_forms_of_release_6_still_work_with_no_start_marks(
        conn: psycopg.Connection[Any], new_schema: Callable[[str], str]) -> None:
    """Workers of release 6 call ``claim()`` (10 arguments), ``heartbeat_verdicts()`` (3) and
    ``settle()`` (5) during a rolling upgrade: each answers as before, and no start mark is
    written (the job's start stays its claim's time)."""
    schema = new_schema("r6")
    pg_migrations.migrate(conn, schema)
    with conn.transaction():
        conn.execute(f'SET LOCAL search_path TO "{schema}"')
        conn.execute("SELECT * FROM publish('old', 'jobs', 'm', '', 0, 0, '', '', 0, '', 0, "
                     "0, 1000, 0, NULL, NULL, NULL)")
        [(token,)] = conn.execute(
            "SELECT o_token FROM claim(ARRAY['jobs'], 'w0', 1, 10, 60000, 1000, NULL, NULL, "
            "NULL, NULL) WHERE o_kind = 'c'").fetchall()
        assert conn.execute("SELECT * FROM heartbeat_verdicts(ARRAY['old'], ARRAY[%s::bigint], "
                            "60000)", [token]).fetchall() == []
        [(started,)] = conn.execute("SELECT started_ms FROM jobs WHERE id = 'old'").fetchall()
        assert conn.execute("SELECT * FROM settle(ARRAY['old'], ARRAY[%s::bigint], "
                            "ARRAY['ack'], ARRAY[''], 1000)", [token]).fetchall() == []
        assert conn.execute("SELECT state, started_ms, start_mark FROM jobs WHERE id = 'old'"
                            ).fetchall() == [("completed", started, None)]
