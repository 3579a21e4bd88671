"""The admin on the SQL stores (SQLite, PostgreSQL): what their two admins share, once.

:class:`SqlAdmin` lists jobs (a page by a deferred join, a text search by keyset paging),
selects a bulk operation's candidates and runs the reads whose statements both dialects
accept. Each store's admin (``sqlite/admin.py``, ``postgres/admin.py``) adds its dialect
(parameter mark, id order, the keyset's parameters), the statements it tunes for its planner
(counts, status depths, a listing's condition and page) and its changes.

A listing row's long texts are cut in SQL and a large message is left out (its size is read
instead), as ``model/admin.py``'s rules ask; a text search reads whole records.

Counts are capped (``model/capped.py``): no count reads more than ``CAPPED`` rows of an index,
so the overview, the status, ``/metrics`` and a listing's first page cost the same with a
million jobs waiting as with ten thousand. A state over the cap is counted per queue (its
queues found by a loose index scan), and its oldest waiting job is looked for among the
:data:`HEAD` jobs at the head of each queue; a listing of more than ``COUNT_CAP`` enqueued
jobs (with or without filters) is paged in the claim index's order (queue by queue, priority
then arrival), as Redis pages it, instead of being sorted by time.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from celery_plus.model.admin import (
    LIST_TEXT,
    PREVIEW_BYTES,
    PURGEABLE,
    SEARCH_CHUNK,
    STATES,
    Query,
    Scope,
    batches,
    time_field,
)
from celery_plus.model.capped import CAPPED, is_capped
from celery_plus.model.checkpoint import checkpoint
from celery_plus.stores.admin_base.aggregates import StatusRows
from celery_plus.stores.admin_base.listing import Record
from celery_plus.stores.admin_base.orchestration import B, StoreAdmin
from celery_plus.stores.admin_base.queue_history import DepthRow
from celery_plus.stores.sql_record import row_record

#: The ``jobs`` columns a text search reads of each record (whole: it searches all of them).
SEARCH_COLUMNS = ("state", "name", "queue", "enqueued_ms", "due_ms", "started_ms",
                  "finished_ms", "deliveries", "reason", "exc_type", "exc_message", "msg",
                  "traceback", "token", "start_mark", "rate_parked")
#: A running job that has started (not reserved: its worker's start mark is not -token).
NOT_RESERVED = " AND (start_mark IS NULL OR start_mark <> -token)"
#: A running job its worker claimed and has not started (reserved: start mark -token).
RESERVED = "state = 'running' AND start_mark = -token"
#: States whose per-queue depth ``status`` shows.
DEPTH_STATES = ("enqueued", "scheduled", "blocked", "running", "failed")
#: Jobs looked at from the head of each queue for "oldest waiting" when a state is over the cap.
HEAD = 50


def state_is(state: str, alias: str = "") -> str:
    """The condition keeping the rows of ``state``, spelled literally (one of STATES) so that
    PostgreSQL's partial indexes, whose predicates name the states, serve it."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}")
    return f"{alias}state = '{state}'"


def capped_count(condition: str) -> str:
    """A scalar subquery: the rows of ``jobs`` meeting ``condition``, CAPPED at most."""
    return (f"(SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {condition} LIMIT {CAPPED}) "
            "AS capped)")


def queues_of(condition: str) -> str:
    """The distinct queues of the rows meeting ``condition`` by a loose index scan: one index
    probe per queue (the state's index leads with the queue) instead of reading every row."""
    return (f"WITH RECURSIVE q(queue) AS (SELECT (SELECT min(queue) FROM jobs WHERE "
            f"{condition}) UNION ALL SELECT (SELECT min(queue) FROM jobs WHERE {condition} "
            "AND queue > q.queue) FROM q WHERE q.queue IS NOT NULL) "
            "SELECT queue FROM q WHERE queue IS NOT NULL")


def summary_columns(alias: str, byte_length: str) -> tuple[tuple[str, ...], str]:
    """(the column each value is, the SQL select list with the id first) of a listing row,
    the columns qualified by ``alias`` (``"j."`` or ``""``); ``byte_length`` is the dialect's
    byte length of the message column (``"octet_length({})"``), read as ``msg_size``."""
    cut = f"substr({alias}{{}}, 1, {LIST_TEXT + 1})"
    size = byte_length.format(f"{alias}msg")
    fields = (("state", f"{alias}state"), ("name", cut.format("name")),
              ("queue", cut.format("queue")), ("enqueued_ms", f"{alias}enqueued_ms"),
              ("due_ms", f"{alias}due_ms"), ("started_ms", f"{alias}started_ms"),
              ("finished_ms", f"{alias}finished_ms"), ("deliveries", f"{alias}deliveries"),
              ("reason", cut.format("reason")), ("exc_type", cut.format("exc_type")),
              ("exc_message", cut.format("exc_message")),
              ("msg", f"CASE WHEN {size} <= {PREVIEW_BYTES} THEN {alias}msg END"),
              ("msg_size", size), ("token", f"{alias}token"),
              ("start_mark", f"{alias}start_mark"), ("rate_parked", f"{alias}rate_parked"))
    return (tuple(name for name, _ in fields),
            ", ".join([f"{alias}id", *(sql for _, sql in fields)]))


@dataclass(frozen=True)
class Listing:
    """A listing's WHERE condition and its parameters, the time expression it filters and
    orders by, and its direction (``DESC``: newest first)."""

    condition: str
    params: list[Any]
    at: str
    direction: str


class SqlAdmin(StoreAdmin[B]):
    """:class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin` on a ``jobs`` table."""

    #: The dialect's parameter mark.
    MARK: ClassVar[str]
    #: The id as listings and selections order it (the other stores compare bytes).
    ID: ClassVar[str]
    #: A search's keyset parameters: the (time, id) the next chunk starts after.
    KEYSET: ClassVar[str]
    #: The dialect's larger of two values.
    GREATEST: ClassVar[str]
    #: (columns, select list) of a listing row (:func:`summary_columns`).
    SUMMARY: ClassVar[tuple[tuple[str, ...], str]]

    @abstractmethod
    def _all(self, sql: str, *params: Any) -> list[Any]:
        """All rows of one read statement."""

    @abstractmethod
    def _page_sql(self, state: str, listing: Listing) -> str:
        """A page of ``listing`` (the :attr:`SUMMARY` columns, in order); its parameters are
        the listing's, then the limit and the offset."""

    @abstractmethod
    def _among(self, ids: Sequence[str]) -> tuple[str, list[Any]]:
        """A condition (and its parameters) keeping the rows of these ids."""

    def _listing(self, state: str, query: Query) -> Listing:
        """The rows of ``state`` in the query's task, queue and time filters."""
        # Finished records always have a finish time: the bare column lets the index on
        # (state, finished_ms, id) order them (a page, a text search's chunks and each
        # chunk's keyset); other states may lack theirs.
        column = time_field(state)
        at = column if state in PURGEABLE else f"COALESCE({column}, 0)"
        clauses: list[str] = [state_is(state)]
        values: list[Any] = []
        mark = self.MARK
        for value, clause in ((query.task, f"name = {mark}"), (query.queue, f"queue = {mark}"),
                              (query.since_ms, f"{at} >= {mark}"),
                              (query.until_ms, f"{at} <= {mark}")):
            if value is not None:
                clauses.append(clause)
                values.append(value)
        return Listing(" AND ".join(clauses), values, at,
                       "ASC" if query.oldest_first else "DESC")

    # -- listings -----------------------------------------------------------------------
    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[Record], int]:
        listing = self._listing(state, query)
        total = int(self._all(f"SELECT {capped_count(listing.condition)}",
                              *listing.params)[0][0])
        in_queue_order = is_capped(total) and self._queue_order_applies(state, query)
        sql = self._queue_order_page(listing) if in_queue_order else self._page_sql(state,
                                                                                     listing)
        names, _ = self.SUMMARY
        rows = self._all(sql, *listing.params, limit, offset)
        return [row_record(row[0], names, row[1:]) for row in rows], total

    def _queue_order_page(self, listing: Listing) -> str:
        """A page of enqueued jobs in the claim index's order (queue, then score: priority
        then arrival; newest first backwards): the page's keys are read from the index alone,
        then its rows."""
        order = f"queue {listing.direction}, score {listing.direction}"
        keys = (f"SELECT queue, score FROM jobs WHERE {listing.condition} ORDER BY {order} "
                f"LIMIT {self.MARK} OFFSET {self.MARK}")
        return (f"SELECT {self.SUMMARY[1]} FROM ({keys}) p JOIN jobs j ON "
                f"{state_is('enqueued', 'j.')} AND j.queue = p.queue "
                f"AND j.score = p.score ORDER BY p.{order.replace(', ', ', p.')}")

    def candidates(self, state: str, query: Query) -> Iterator[Record]:
        """Whole records, SEARCH_CHUNK at a time, each chunk after the (time, id) of the
        previous one's last row (keyset paging): the memory is one chunk, however large the
        records; none read past the query's ``text_limit`` and one more (which tells whether
        the limit cut the search short).

        A search with a ``text_limit`` (a scan window) reads the window's ids once, as the
        listing's page of that size (the same order and indexes, the claim index's order for
        a capped enqueued listing), then their whole records by id: one ordered read instead
        of one per chunk (each a full scan and sort where no index orders the state: 154 s
        at 100,000 waiting jobs on PostgreSQL, issue #28)."""
        if query.text_limit is not None:
            yield from self._window(state, query, query.text_limit + 1)
            return
        listing = self._listing(state, query)
        at, ident, direction = listing.at, self.ID, listing.direction
        columns = ", ".join(["id", at, *SEARCH_COLUMNS])
        after = "<" if direction == "DESC" else ">"
        last: tuple[Any, Any] | None = None
        seen = 0
        while query.text_limit is None or seen < query.text_limit:
            checkpoint()  # (the work may stop between two chunks)
            keyset = "" if last is None else f" AND ({at}, {ident}) {after} {self.KEYSET}"
            rows = self._all(f"SELECT {columns} FROM jobs WHERE {listing.condition}{keyset} "
                             f"ORDER BY {at} {direction}, {ident} {direction} "
                             f"LIMIT {SEARCH_CHUNK}", *listing.params, *(last or ()))
            for row in rows:
                seen += 1
                yield row_record(row[0], SEARCH_COLUMNS, row[2:])
            if len(rows) < SEARCH_CHUNK:
                return
            last = (rows[-1][1], rows[-1][0])

    def _window(self, state: str, query: Query, size: int) -> Iterator[Record]:
        """Whole records of the first ``size`` rows of the listing (still in ``state``)."""
        listing = self._listing(state, query)
        if self._in_queue_order(state, query, listing):
            order = f"queue {listing.direction}, score {listing.direction}"
        else:
            order = f"{listing.at} {listing.direction}, {self.ID} {listing.direction}"
        ids = [str(row[0]) for row in self._all(
            f"SELECT id FROM jobs WHERE {listing.condition} ORDER BY {order} "
            f"LIMIT {self.MARK}", *listing.params, size)]
        for chunk in batches(ids, SEARCH_CHUNK):  # (a checkpoint before each)
            among, params = self._among(chunk)
            # The state is checked here, not in SQL: with it there SQLite's planner walks a
            # state index (a million entries) instead of looking the ids up.
            rows = {str(row[0]): row for row in self._all(
                f"SELECT id, {', '.join(SEARCH_COLUMNS)} FROM jobs WHERE {among}", *params)}
            for job_id in chunk:
                row = rows.get(job_id)
                if row is not None and row[1] == state:
                    yield row_record(job_id, SEARCH_COLUMNS, row[1:])

    @staticmethod
    def _queue_order_applies(state: str, query: Query) -> bool:
        """Whether a listing of ``state`` over the count cap is paged in the claim index's
        order: enqueued jobs, whatever the filters. No index orders a task's waiting jobs, or
        a time range of them, by time: that order sorted every match (1.5 to 3.6 s at a
        million waiting jobs of one task); the claim index is walked and stops at the page."""
        return state == "enqueued"

    def _in_queue_order(self, state: str, query: Query, listing: Listing) -> bool:
        """Whether a search window of ``listing`` is read in the claim index's order
        (:meth:`page`'s rule)."""
        if not self._queue_order_applies(state, query):
            return False
        return is_capped(int(self._all(f"SELECT {capped_count(listing.condition)}",
                                       *listing.params)[0][0]))

    def select(self, state: str, scope: Scope) -> list[str]:
        mark = self.MARK
        where: list[str] = [f"state = {mark}"]
        params: list[Any] = [state]
        for value, clause in ((scope.task, f"name = {mark}"), (scope.queue, f"queue = {mark}")):
            if value is not None:
                where.append(clause)
                params.append(value)
        if scope.older_than_ms is not None:
            where.append(f"COALESCE(finished_ms, 0) <= {mark}")
            params.append(self.now_ms() - scope.older_than_ms)
        if scope.ids is not None:
            among, ids = self._among(scope.ids)
            where.append(among)
            params += ids
        return [row[0] for row in self._all(
            f"SELECT id FROM jobs WHERE {' AND '.join(where)} ORDER BY finished_ms, {self.ID}",
            *params)]

    # -- rows for the summaries --------------------------------------------------------
    def count_rows(self) -> list[tuple[str, int]]:
        return self._all(" UNION ALL ".join(
            [f"SELECT '{state}', {capped_count(state_is(state))}" for state in STATES]
            + [f"SELECT 'reserved', {capped_count(RESERVED)}"]))

    def status_rows(self) -> StatusRows:
        depth: list[tuple[str, str, int]] = []
        oldest: list[tuple[str, int]] = []
        for state in DEPTH_STATES:
            rows, over = self._depth(state)
            depth += rows
            if state in ("enqueued", "blocked"):
                oldest += self._oldest(state, [q for q, _, _ in rows] if over else None)
        depth += [(str(q), "reserved", int(n)) for q, n in self._all(
            f"SELECT queue, count(*) FROM (SELECT queue FROM jobs WHERE {RESERVED} "
            f"LIMIT {CAPPED}) AS sample GROUP BY queue")]
        return StatusRows(
            depth=depth, oldest=oldest,
            blocked=self._all(
                "SELECT conc_group, count(*), max(conc_limit) FROM jobs WHERE state = 'blocked' "
                "AND conc_group IS NOT NULL AND conc_group <> '' GROUP BY conc_group"),
            running=self._all(
                "SELECT s.conc_group, count(*), max(j.conc_limit) FROM slots s JOIN jobs j "
                "ON j.id = s.job_id AND j.state = 'running' GROUP BY s.conc_group"))

    def _depth(self, state: str) -> tuple[list[tuple[str, str, int]], bool]:
        """(queue, state, jobs) rows of ``state``, each count capped, and whether the state is
        over the cap (then its queues were found by a loose index scan)."""
        where = state_is(state)
        rows = self._all(f"SELECT queue, count(*) FROM (SELECT queue FROM jobs WHERE {where} "
                         f"LIMIT {CAPPED}) AS sample GROUP BY queue")
        if sum(int(n) for _, n in rows) < CAPPED:
            return [(str(q), state, int(n)) for q, n in rows], False
        of_queue = f"{where} AND queue = {self.MARK}"
        return [(str(q), state, int(self._all(f"SELECT {capped_count(of_queue)}", q)[0][0]))
                for (q,) in self._all(queues_of(where))], True

    def _oldest(self, state: str, queues: list[str] | None) -> list[tuple[str, int]]:
        """(queue, since when its longest-waiting job of ``state`` waits) rows: exact for a
        state within the cap (``queues`` None), else among the HEAD jobs at each queue's head."""
        since = f"min({self.GREATEST}(enqueued_ms, due_ms))"
        if queues is None:
            return self._all(f"SELECT queue, {since} FROM jobs WHERE {state_is(state)} "
                             "GROUP BY queue")
        head = (f"SELECT enqueued_ms, due_ms FROM jobs WHERE {state_is(state)} AND queue = "
                f"{self.MARK} ORDER BY score LIMIT {HEAD}")
        found = ((q, self._all(f"SELECT {since} FROM ({head}) AS h", q)[0][0]) for q in queues)
        return [(q, int(at)) for q, at in found if at is not None]

    def queue_depth_rows(self) -> list[DepthRow]:
        rows, over = self._depth("enqueued")
        oldest = dict(self._oldest("enqueued", [q for q, _, _ in rows] if over else None))
        return [(q, n, None if oldest.get(q) is None else int(oldest[q]))
                for q, _, n in rows if n]

    # -- the queue history (table queue_history) ---------------------------------------
    keeps_history = True

    def history_rows(self, since_ms: int, until_ms: int) -> list[tuple[int, int, str]]:
        mark = self.MARK
        return [(int(b), int(at), str(sample)) for b, at, sample in self._all(
            f"SELECT bucket_ms, at_ms, sample FROM queue_history WHERE bucket_ms >= {mark} "
            f"AND bucket_ms <= {mark} ORDER BY bucket_ms", since_ms, until_ms)]

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        # The states spelled literally, so that the finish-time index serves both counts.
        mark = self.MARK
        [(completed, failed)] = self._all(
            f"SELECT (SELECT count(*) FROM jobs WHERE state = 'completed' AND finished_ms >= "
            f"{mark}), (SELECT count(*) FROM jobs WHERE state = 'failed' AND finished_ms >= "
            f"{mark})", since_ms, since_ms)
        return int(completed), int(failed)

    def finished_rows(self, since_ms: int, bucket_ms: int, buckets: int
                      ) -> list[tuple[str, int, int]]:
        mark, until = self.MARK, since_ms + bucket_ms * buckets
        sql = " UNION ALL ".join(
            f"SELECT '{state}', (finished_ms - {mark}) / {mark}, count(*) FROM jobs WHERE "
            f"state = '{state}' AND finished_ms >= {mark} AND finished_ms < {mark} GROUP BY 2"
            for state in ("completed", "failed"))
        return self._all(sql, *([since_ms, bucket_ms, since_ms, until] * 2))

    def wait_rows(self, since_ms: int, limit: int) -> list[tuple[int, str, int | None]]:
        # Finished jobs started since then finished since then too: the finish-time index
        # narrows them down.
        mark = self.MARK
        parts = [f"SELECT * FROM (SELECT started_ms, queue, started_ms - {self.GREATEST}("
                 f"enqueued_ms, COALESCE(due_ms, 0)) FROM jobs WHERE state = '{state}' AND "
                 f"started_ms >= {mark}{extra} ORDER BY started_ms DESC LIMIT {mark}) {state}"
                 for state, extra in (("running", NOT_RESERVED),
                                      ("completed", f" AND finished_ms >= {mark}"),
                                      ("failed", f" AND finished_ms >= {mark}"))]
        return self._all(" UNION ALL ".join(parts) + f" ORDER BY 1 DESC LIMIT {mark}",
                         since_ms, limit, since_ms, since_ms, limit, since_ms, since_ms, limit,
                         limit)

    def runtime_rows(self, since_ms: int, limit: int) -> list[tuple[int, str, int | None]]:
        # The finish-time index (state, finished_ms, id) serves it.
        mark = self.MARK
        return self._all(f"SELECT finished_ms, queue, finished_ms - started_ms FROM jobs WHERE "
                         f"state = 'completed' AND finished_ms >= {mark} AND started_ms IS NOT "
                         f"NULL ORDER BY finished_ms DESC LIMIT {mark}", since_ms, limit)

    def lease_rows(self) -> list[tuple[str, int, int | None, int | None]]:
        return self._all(
            "SELECT worker, count(*), max(lease_expires_ms), min(started_ms) FROM jobs "
            "WHERE state = 'running' AND worker IS NOT NULL GROUP BY worker")
