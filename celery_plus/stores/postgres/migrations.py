"""Schema migrations and function files of the PostgreSQL store.

Each store lives in one schema (the ``plus_pg_schema`` setting, default ``celery_plus``).

* ``sql/NNNN_name.sql``: versioned migrations holding the schema only (tables, sequences,
  indexes, data changes), listed once applied in ``<schema>.schema_migrations``.
* ``functions/<name>.sql``: every function (and trigger) once, in its current version, written
  with ``CREATE OR REPLACE``. After the migrations, each file whose SHA-256 differs from the one
  recorded in ``<schema>.function_versions`` is executed, all in one transaction; unchanged
  files are skipped. The set of files has a release number (:data:`FUNCTIONS_RELEASE`,
  recorded with each file): a process whose release is older than the schema's applies none,
  so during a rolling upgrade a restarted process of the earlier version never puts its older
  bodies back over the newer ones (``db status`` shows them as ``newer``). A file whose
  change alters a function's return type or argument names
  starts with the ``DROP FUNCTION IF EXISTS`` it needs: the applier never drops anything
  itself (an older overload may be kept for processes of earlier versions, e.g.
  ``publish()``; a ``CASCADE`` would silently take triggers along).
* The rules' constants (:data:`celery_plus.model.rules.RENDERED`) are never retyped in SQL:
  ``functions/rules.sql`` names them ``{{NAME}}`` and :func:`function_files` renders them
  (:func:`render_rules`) before a file is hashed, so a changed constant is a changed file,
  applied again. Every other function reads them from ``rules.sql``'s functions
  (``priority_factor()``, ``history_max()``, ``waiting_states()``, ``finished_states()``).

:func:`migrate` does both under a session advisory lock of the schema (``pg_advisory_lock``):
when many workers start at once, one creates the schema and the others wait, then find it
done — no "already exists" error, no half-applied version. A store already up to date costs a
few reads and takes no lock.

Used automatically by the backend on first use in a process, and by ``celery-plus db migrate``
/ ``celery-plus db status``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from celery.exceptions import ImproperlyConfigured

from celery_plus.model import rules
from celery_plus.stores.postgres.bounds import DEFAULT_BOUNDS

#: A schema name: a lower-case SQL identifier, short enough for the wake-up channel name.
SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION_FILE_RE = re.compile(r"^([a-z_][a-z0-9_]*)\.sql$")
_PLACEHOLDER_RE = re.compile(r"\{\{([A-Z_]+)\}\}")
_PACKAGE = "celery_plus.stores.postgres"
#: The release of the function files: raised whenever any file changes (a test compares the
#: files with ``tests/stores/fixtures/postgres_functions.json`` and says so).
FUNCTIONS_RELEASE = 10


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class FunctionFile:
    """``functions/<name>.sql``: one function (or a few related ones) as it is now."""

    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class Applied:
    """What one :func:`migrate` call applied (both empty when the store was up to date)."""

    migrations: list[Migration] = field(default_factory=list)
    functions: list[FunctionFile] = field(default_factory=list)


@dataclass(frozen=True)
class FunctionStatus:
    """A function file: ``current``, ``pending`` (never applied), ``changed`` (another hash
    applied), ``newer`` (a later release applied, left alone by this one) or ``unknown``
    (recorded in the schema, no such file in this version)."""

    name: str
    state: str
    applied_at: Any = None


@dataclass(frozen=True)
class Status:
    """One known or applied version: ``applied_at`` is None while it is pending."""

    version: int
    name: str
    applied_at: Any = None


def check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not SCHEMA_RE.match(schema) or schema.startswith("pg_"):
        raise ImproperlyConfigured(
            f"Setting plus_pg_schema={schema!r} is invalid: expected a lower-case identifier "
            "(letters, digits, '_'; at most 48 characters, not starting with a digit nor "
            "'pg_'), e.g. 'celery_plus'.")
    return schema


def quoted(schema: str) -> str:
    """The schema as a quoted SQL identifier (validated first)."""
    return '"' + check_schema(schema) + '"'


def migrations() -> list[Migration]:
    """The migrations shipped with celery-plus, in version order."""
    folder = resources.files(_PACKAGE) / "sql"
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    return found


def _sql_literal(value: int | tuple[str, ...]) -> str:
    if isinstance(value, tuple):
        if not all(re.fullmatch(r"[a-z_]+", v) for v in value):
            raise ValueError(f"not plain names: {value!r}")
        return "ARRAY[" + ", ".join(f"'{v}'" for v in value) + "]"
    return str(int(value))


def render_rules(sql: str,
                 constants: Mapping[str, int | tuple[str, ...]] = rules.RENDERED) -> str:
    """``sql`` with each ``{{NAME}}`` replaced by ``constants[NAME]`` as an SQL literal (a
    number, or ``ARRAY['a', 'b']``); an unknown name is an error."""
    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in constants:
            raise ValueError(f"{{{{{name}}}}}: not a constant of model/rules.py RENDERED")
        return _sql_literal(constants[name])

    return _PLACEHOLDER_RE.sub(literal, sql)


def function_files() -> list[FunctionFile]:
    """The function files shipped with celery-plus, by name (the order they are applied), with
    the rules' constants rendered (:func:`render_rules`)."""
    folder = resources.files(_PACKAGE) / "functions"
    found = [FunctionFile(match.group(1), render_rules(entry.read_text()))
             for entry in folder.iterdir() if (match := _FUNCTION_FILE_RE.match(entry.name))]
    return sorted(found, key=lambda f: f.name)


def _lock_key(schema: str) -> str:
    # A name every celery-plus version locks alike: it must never change.
    return f"celery_plus.migrate:{schema}"


def _rows(conn: Any, schema: str, table: str, columns: str) -> list[Any]:
    """The rows of one of the schema's bookkeeping tables ([] while it does not exist)."""
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                          [f"{quoted(schema)}.{table}"]).fetchone()[0]
    if not exists:
        return []
    return list(conn.execute(f"SELECT {columns} FROM {quoted(schema)}.{table}").fetchall())


def _applied(conn: Any, schema: str) -> dict[int, Any]:
    """Applied versions -> applied_at ({} when the schema or its table does not exist)."""
    return {int(version): at
            for version, at in _rows(conn, schema, "schema_migrations", "version, applied_at")}


def _recorded(conn: Any, schema: str) -> dict[str, tuple[str, Any, int]]:
    """Function file name -> (sha256, applied_at, release) as last applied to the schema."""
    rows = _rows(conn, schema, "function_versions", "name, sha256, applied_at, release")
    return {name: (sha, at, release) for name, sha, at, release in rows}


def _newer_release(recorded: dict[str, tuple[str, Any, int]]) -> bool:
    """True when a later celery-plus release applied the schema's function files."""
    return max((release for _, _, release in recorded.values()), default=0) > FUNCTIONS_RELEASE


def pending(conn: Any, schema: str) -> list[Migration]:
    done = _applied(conn, schema)
    return [m for m in migrations() if m.version not in done]


def pending_functions(conn: Any, schema: str) -> list[FunctionFile]:
    """Function files never applied to the schema, or changed since they were."""
    recorded = _recorded(conn, schema)
    if _newer_release(recorded):
        return []
    return [f for f in function_files()
            if recorded.get(f.name, ("", None, 0))[0] != f.sha256]


def _create_bookkeeping(conn: Any, schema: str) -> None:
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted(schema)}")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {quoted(schema)}.schema_migrations ("
        "version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {quoted(schema)}.function_versions ("
        "name text PRIMARY KEY, sha256 text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
        "release integer NOT NULL DEFAULT 0)")


def _apply_migrations(conn: Any, schema: str) -> list[Migration]:
    """The pending migrations, each in its own transaction (caller holds the lock)."""
    applied: list[Migration] = []
    for migration in pending(conn, schema):
        with conn.transaction():
            conn.execute(f"SET LOCAL search_path TO {quoted(schema)}")
            conn.execute(migration.sql)
            conn.execute(
                f"INSERT INTO {quoted(schema)}.schema_migrations (version, name) "
                "VALUES (%s, %s)", [migration.version, migration.name])
        applied.append(migration)
    return applied


def _apply_functions(conn: Any, schema: str) -> list[FunctionFile]:
    """The changed function files, all in one transaction (caller holds the lock).

    Bodies are checked when called, not when created (``check_function_bodies`` off, as
    pg_dump does), so files apply in name order whatever calls what.
    """
    files = pending_functions(conn, schema)
    if not files:
        return []
    with conn.transaction():
        conn.execute(f"SET LOCAL search_path TO {quoted(schema)}")
        conn.execute("SET LOCAL check_function_bodies TO off")
        for file in files:
            conn.execute(file.sql)
            conn.execute(
                f"INSERT INTO {quoted(schema)}.function_versions (name, sha256, release) "
                "VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET sha256 = "
                "excluded.sha256, release = excluded.release, applied_at = clock_timestamp()",
                [file.name, file.sha256, FUNCTIONS_RELEASE])
    return files


def migrate(conn: Any, schema: str) -> Applied:
    """Apply the missing migrations, then the changed function files, to ``schema``.

    ``conn`` is a psycopg 3 connection in autocommit mode (each migration runs in its own
    transaction, the function files in one; the advisory lock is held by the session
    meanwhile). Returns what this call applied.
    """
    check_schema(schema)
    if not pending(conn, schema) and not pending_functions(conn, schema):
        return Applied()
    conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [_lock_key(schema)])
    try:
        _create_bookkeeping(conn, schema)
        applied = _apply_migrations(conn, schema)
        return Applied(applied, _apply_functions(conn, schema))
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_lock_key(schema)])


def status(conn: Any, schema: str) -> list[Status]:
    """Every known version (applied or pending), plus applied versions this code lacks."""
    done = _applied(conn, schema)
    known = {m.version: m for m in migrations()}
    out = [Status(m.version, m.name, done.get(m.version)) for m in known.values()]
    out += [Status(v, "(unknown to this celery-plus version)", at)
            for v, at in done.items() if v not in known]
    return sorted(out, key=lambda s: s.version)


def function_status(conn: Any, schema: str) -> list[FunctionStatus]:
    """Every function file (current, pending, changed or newer), plus recorded names this code
    lacks."""
    recorded = _recorded(conn, schema)
    newer = _newer_release(recorded)
    out: list[FunctionStatus] = []
    for file in function_files():
        sha, at, _ = recorded.pop(file.name, (None, None, 0))
        state = ("current" if sha == file.sha256 else "newer" if newer
                 else "pending" if sha is None else "changed")
        out.append(FunctionStatus(file.name, state, at))
    out += [FunctionStatus(name, "unknown", at) for name, (_, at, _) in recorded.items()]
    return sorted(out, key=lambda s: s.name)


def connect(url: str, **params: Any) -> Any:
    """An autocommit psycopg connection for migrations (clear error when psycopg is missing);
    ``params``: libpq's (default: the default bounds' keepalives and timeouts, ``bounds.py``;
    no bound on a reply: a migration may wait for another process's)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImproperlyConfigured(
            "The plus+postgresql:// transport needs psycopg 3: "
            "pip install 'celery-plus[postgres]'.") from exc
    return psycopg.connect(url, autocommit=True,
                           **(params or DEFAULT_BOUNDS.libpq_params(url)))
