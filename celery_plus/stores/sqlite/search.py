"""The SQLite store's text-search index: an FTS5 trigram table kept by triggers.

``job_search`` holds each job's search document (``model/admin.py``'s
:func:`~celery_plus.model.admin.search_document`, built here in SQL from the row) under the
rowid ``search_rows`` gives its task id (stable: ``jobs`` has no integer key of its own). The
triggers keep it as jobs are written: a publish, a dead letter (the error fields), a delete
(purge, prune); claims, heartbeats and settles name none of the document's columns and do not
fire them. A store made before the index is indexed once, on the first connection of this
version (``meta`` key ``search``). A SQLite without FTS5's trigram tokenizer (before 3.34)
gets no index: its text searches read their candidates (:func:`installed`).
"""

from __future__ import annotations

import sqlite3

#: The ``argsrepr`` and ``kwargsrepr`` headers of a row's envelope, each followed by a newline.
_REPRS = ("CASE WHEN json_valid(CAST({a}msg AS TEXT)) THEN COALESCE((SELECT "
          "group_concat(value || char(10), '') FROM (SELECT value FROM json_each(CAST({a}msg "
          "AS TEXT), '$.headers') WHERE key IN ('argsrepr', 'kwargsrepr') AND type = 'text' "
          "AND value <> '' ORDER BY key)), '') ELSE '' END")


def document(alias: str) -> str:
    """The search document of the row ``alias`` (``new.``, ``j.``) as an SQL expression."""
    def field(name: str) -> str:
        return f"COALESCE(NULLIF({alias}{name}, '') || char(10), '')"

    return " || ".join([field("id"), field("name"), _REPRS.format(a=alias),
                        *(field(n) for n in ("exc_type", "exc_message", "reason", "traceback"))])


def _reindex(key: str) -> str:
    """Write the document of the job ``key`` (``new.id``) again."""
    return (f"INSERT OR IGNORE INTO search_rows (id) VALUES ({key}); "
            f"DELETE FROM job_search WHERE rowid = (SELECT n FROM search_rows WHERE id = {key}); "
            f"INSERT INTO job_search (rowid, doc) SELECT n, {document('new.')} FROM search_rows "
            f"WHERE id = {key};")


_TABLES = """
CREATE TABLE IF NOT EXISTS search_rows (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE);
CREATE VIRTUAL TABLE IF NOT EXISTS job_search USING fts5(doc, tokenize = 'trigram');
"""

#: Run once, while ``meta`` has no ``search`` mark (every connection runs :func:`install`).
_BACKFILL = f"""
INSERT OR IGNORE INTO search_rows (id) SELECT id FROM jobs;
INSERT INTO job_search (rowid, doc) SELECT r.n, {document('j.')} FROM jobs j
JOIN search_rows r ON r.id = j.id;
INSERT OR IGNORE INTO meta (key, value) VALUES ('search', 1);
"""

_TRIGGERS = f"""
CREATE TRIGGER IF NOT EXISTS jobs_search_insert AFTER INSERT ON jobs BEGIN
{_reindex('new.id')}
END;
CREATE TRIGGER IF NOT EXISTS jobs_search_update
AFTER UPDATE OF name, msg, exc_type, exc_message, reason, traceback ON jobs BEGIN
{_reindex('new.id')}
END;
CREATE TRIGGER IF NOT EXISTS jobs_search_delete AFTER DELETE ON jobs BEGIN
DELETE FROM job_search WHERE rowid = (SELECT n FROM search_rows WHERE id = old.id);
DELETE FROM search_rows WHERE id = old.id;
END;
"""


def install(conn: sqlite3.Connection) -> None:
    """Create the index and its triggers if missing (inside the caller's schema transaction);
    without FTS5's trigram tokenizer, nothing."""
    try:
        conn.execute("SAVEPOINT search_index")
        indexed = conn.execute("SELECT 1 FROM meta WHERE key = 'search'").fetchone()
        for script in (_TABLES, "" if indexed else _BACKFILL, _TRIGGERS):
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("RELEASE search_index")
    except sqlite3.OperationalError as exc:
        if "trigram" not in str(exc) and "fts5" not in str(exc):
            raise
        conn.execute("ROLLBACK TO search_index")
        conn.execute("RELEASE search_index")


def _statements(script: str) -> list[str]:
    """The statements of ``script``, a trigger's body kept whole
    (:func:`sqlite3.complete_statement`)."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    return out


def installed(conn: sqlite3.Connection) -> bool:
    """Whether the store has the index (see :func:`install`)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'job_search'").fetchone() \
        is not None


def match(text: str) -> str:
    """An FTS5 query for ``text`` as a substring: one phrase of its trigrams."""
    return '"' + text.replace('"', '""') + '"'
