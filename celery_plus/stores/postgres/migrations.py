"""Versioned schema migrations of the PostgreSQL store (``sql/NNNN_name.sql``).

Each store lives in one schema (the ``plus_pg_schema`` setting, default ``celery_plus``) with a
``schema_migrations`` table listing the versions applied. :func:`migrate` applies the missing
ones in order, each in its own transaction, under a session advisory lock of that schema
(``pg_advisory_lock``): when many workers start at once, one creates the schema and the others
wait, then find it done — no "already exists" error, no half-applied version. A store already
up to date costs one query and takes no lock.

Used automatically by the backend on first use in a process, and by ``celery-plus db migrate``
/ ``celery-plus db status``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from celery.exceptions import ImproperlyConfigured

#: A schema name: a lower-case SQL identifier, short enough for the wake-up channel name.
SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


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
    folder = resources.files("celery_plus.stores.postgres") / "sql"
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    return found


def _lock_key(schema: str) -> str:
    return f"celery_plus.queue_migration.migrate:{schema}"


def _applied(conn: Any, schema: str) -> dict[int, Any]:
    """Applied versions -> applied_at ({} when the schema or its table does not exist)."""
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                          [f"{quoted(schema)}.schema_migrations"]).fetchone()[0]
    if not exists:
        return {}
    rows = conn.execute(
        f"SELECT version, applied_at FROM {quoted(schema)}.schema_migrations").fetchall()
    return {int(version): at for version, at in rows}


def pending(conn: Any, schema: str) -> list[Migration]:
    done = _applied(conn, schema)
    return [m for m in migrations() if m.version not in done]


def migrate(conn: Any, schema: str) -> list[Migration]:
    """Apply the missing migrations to ``schema``; returns those applied by this call.

    ``conn`` is a psycopg 3 connection in autocommit mode (each migration runs in its own
    transaction; the advisory lock is held by the session meanwhile).
    """
    check_schema(schema)
    if not pending(conn, schema):
        return []
    applied: list[Migration] = []
    conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [_lock_key(schema)])
    try:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted(schema)}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted(schema)}.schema_migrations ("
            "version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
        for migration in pending(conn, schema):
            with conn.transaction():
                conn.execute(f"SET LOCAL search_path TO {quoted(schema)}")
                conn.execute(migration.sql)
                conn.execute(
                    f"INSERT INTO {quoted(schema)}.schema_migrations (version, name) "
                    "VALUES (%s, %s)", [migration.version, migration.name])
            applied.append(migration)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_lock_key(schema)])
    return applied


def status(conn: Any, schema: str) -> list[Status]:
    """Every known version (applied or pending), plus applied versions this code lacks."""
    done = _applied(conn, schema)
    known = {m.version: m for m in migrations()}
    out = [Status(m.version, m.name, done.get(m.version)) for m in known.values()]
    out += [Status(v, "(unknown to this celery-plus version)", at)
            for v, at in done.items() if v not in known]
    return sorted(out, key=lambda s: s.version)


def connect(url: str) -> Any:
    """An autocommit psycopg connection for migrations (clear error when psycopg is missing)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImproperlyConfigured(
            "The plus+postgresql:// transport needs psycopg 3: "
            "pip install 'celery-plus[postgres]'.") from exc
    return psycopg.connect(url, autocommit=True, connect_timeout=10)
