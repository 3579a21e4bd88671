"""The admin on the Redis store: state changes are Lua scripts, reads are plain commands.

Each script in ``lua/admin/`` is prepended with the store's ``lua/lib.lua`` (composed in
``scripts.py``, like the store's own), so it shares the key schema and helpers (``enqueue``,
``release_hold``, ``push_history``, ``forget_if_unblocked``) with the transport. A script acts
on a batch of job ids and re-checks each job's state (and the bulk scope) itself, so the
Python side may pick candidates with plain reads: whatever changed meanwhile is a no-op.

Reads scan the state's index (``P:dead``, ``P:done``, ``P:lease``, ``P:q:{queue}`` ...) and fetch
record fields with pipelined ``HMGET``. Finished-state listings are paged inside Redis: without
filters from the state's own index; by task and/or queue from the admin's listing index
(``lua/admin/index_*.lua``: sets per queue and per task, synced from the state's index by finish
score and cut down to its current members before each count), which also gives ``status`` its
per-queue dead-letter counts. A read syncs a bounded part (``listing_index.READ_BATCHES``); while
the index is behind (a store an earlier release wrote) a filtered read walks the state's sorted
set instead, in the walk's window (``Query.walk_limit``; ``Walked.building`` says why).
Listings of waiting states read every record of the state to order it by time — up to
:data:`ORDERED_MAX` jobs; a larger waiting listing with no time filter is paged in its indexes'
own order, reading only the page (the order they run in: queue by queue, priority then arrival;
scheduled jobs by due time), as are its text searches; with a task or time filter Redis walks
the indexes keeping the filters' jobs (``walk.lua``) and counts them up to ``CAPPED``.
The orchestration (checks, batches, results, summaries) is
:class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from celery_plus.model import rules
from celery_plus.model.admin import (
    LIST_TEXT,
    PREVIEW_BYTES,
    SEARCH_CHUNK,
    Query,
    Scope,
    Walked,
    as_text,
    batches,
    time_field,
)
from celery_plus.model.capped import CAPPED
from celery_plus.stores.admin_base.aggregates import GroupRow, StatusRows
from celery_plus.stores.admin_base.listing import Record, Walk, WalkedRecords
from celery_plus.stores.admin_base.orchestration import Outcome, StoreAdmin
from celery_plus.stores.admin_base.queue_history import DepthRow
from celery_plus.stores.redis import listing_index
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.envelope import envelope_bytes
from celery_plus.stores.redis.error_groups import RedisErrorGroups
from celery_plus.stores.redis.record import job_record
from celery_plus.stores.redis.scripts import admin_sources

#: Finished states and their index (a sorted set scored by finish ms).
FINISHED_INDEX = {"completed": "done", "failed": "dead", "canceled": "canceled",
                  "discarded": "discarded"}
#: The record field of each time a listing orders by (model.admin.time_field).
SORT_FIELD = {"enqueued_ms": "enq", "started_ms": "start", "finished_ms": "fin"}
#: Fields a text search reads of each candidate (whole: it searches them).
SEARCH_FIELDS = ("st", "name", "q", "enq", "due", "start", "fin", "dl", "reason", "etype",
                 "emsg", "msg", "tb", "tok", "sm", "rg")
#: What ``summaries.lua`` returns per job.
SUMMARY_REPLY = ("st", "name", "q", "enq", "due", "start", "fin", "dl", "reason", "etype",
                 "emsg", "msg", "msglen", "tok", "sm", "rp")
#: Waiting jobs a listing orders by time (reading each record); beyond it, index order.
ORDERED_MAX = 10_000
#: Ids read from an index per command when paging in index order.
ID_CHUNK = 1000
#: Index members a walk (``walk.lua``) reads per call (bounds how long Redis is busy).
WALK_CHUNK = 5000
#: Waiting states and whether a queue filter can be answered from their indexes alone.
WAITING_BY_INDEX = {"enqueued": True, "scheduled": False, "blocked": False}
#: Jobs looked at from the head of each priority band of a queue for "oldest waiting".
HEAD = 50
#: One priority's band of scores (rules.score).
BAND = rules.PRIORITY_FACTOR
#: A part of an index a walk reads: (key, first rank in the walk's direction, members).
Span = tuple[str, int, int]


def _reserved(rec: dict[str, str], check_state: bool = True) -> bool:
    """A record (its ``st``, ``tok`` and ``sm`` fields) of a running job its worker claimed
    and has not started: a start mark of -token."""
    return (bool(rec.get("sm")) and rec.get("sm") == f"-{rec.get('tok')}"
            and (not check_state or rec.get("st") == "running"))


class RedisAdmin(RedisErrorGroups, StoreAdmin[RedisBackend]):
    """:class:`~celery_plus.model.admin.AdminStore` on a :class:`RedisBackend`'s store."""

    def __init__(self, backend: RedisBackend, owns_backend: bool = False) -> None:
        super().__init__(backend, owns_backend)
        self.client = backend.client
        self.prefix = backend.prefix
        self._scripts = {name: self.client.register_script(src)
                         for name, src in admin_sources().items()}

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _call(self, script: str, *args: Any) -> Any:
        """Run admin script ``script``; KEYS[1] is the prefix, as for the store's scripts
        (on a Redis Cluster its hash tag routes the call to the slot of every key it uses)."""
        return self._scripts[script](keys=[self.prefix], args=[self.prefix, *args])

    # -- reads --------------------------------------------------------------------------
    def _records(self, ids: Sequence[str], fields: Sequence[str]) -> list[dict[str, str]]:
        """``fields`` of each record (an empty dict for a missing record), in order."""
        out: list[dict[str, str]] = []
        # The envelope lives in P:m:{id} (a record of an older release: the hash's `msg`).
        with_msg = "msg" in fields
        for chunk in batches(ids, 1000):
            pipe = self.client.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hmget(self.key("job", job_id), list(fields))
                if with_msg:
                    pipe.get(self.key("m", job_id))
            replies = pipe.execute()
            step = 2 if with_msg else 1
            for n in range(0, len(replies), step):
                values = replies[n]
                if values[0] is None:
                    out.append({})
                    continue
                rec = {f: as_text(v) for f, v in zip(fields, values, strict=True)
                       if v is not None}
                if with_msg and "msg" not in rec and replies[n + 1] is not None:
                    rec["msg"] = as_text(envelope_bytes(replies[n + 1]))
                out.append(rec)
        return out

    def _members(self, key: str) -> list[str]:
        return [as_text(m) for m in self.client.smembers(key)]

    def _zall(self, key: str) -> list[str]:
        return [as_text(m) for m in self.client.zrange(key, 0, -1)]

    def _queues(self) -> list[str]:
        return sorted(self._members(self.key("queues")))

    def _blocked_indexes(self) -> list[str]:
        """The sorted sets of blocked jobs: per concurrency group, then per rate group."""
        return ([self.key("blk", g) for g in sorted(self._members(self.key("blkgroups")))]
                + [self.key("rblk", g) for g in sorted(self._members(self.key("rblkgroups")))])

    def _index_ids(self, state: str, query: Query) -> list[str]:
        """Ids the index of ``state`` (not a finished state) lists; filters not applied."""
        if state == "running":
            return self._zall(self.key("lease"))
        if state == "scheduled":
            return self._zall(self.key("sched"))
        if state == "enqueued":
            queues = [query.queue] if query.queue else self._queues()
            return [i for q in queues for i in self._zall(self.key("q", q))]
        return [i for k in self._blocked_indexes() for i in self._zall(k)]

    def count_rows(self) -> list[tuple[str, int]]:
        queues, groups = self._queues(), self._blocked_indexes()
        indexes = {"scheduled": "sched", "running": "lease", **FINISHED_INDEX}
        pipe = self.client.pipeline(transaction=False)
        for key in [*(self.key("q", q) for q in queues), *groups,
                    *(self.key(index) for index in indexes.values())]:
            pipe.zcard(key)
        replies = [int(r) for r in pipe.execute()]
        per_index = replies[len(queues) + len(groups):]
        # The running jobs not started yet: their records say so (a start mark of -token).
        leased = self._records(self._zall(self.key("lease")), ("st", "tok", "sm"))
        return [("enqueued", sum(replies[:len(queues)])),
                ("blocked", sum(replies[len(queues):len(queues) + len(groups)])),
                *zip(indexes, per_index, strict=True),
                ("reserved", sum(1 for rec in leased if _reserved(rec)))]

    # -- listings -----------------------------------------------------------------------
    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[Record], int]:
        rows, total, _ = self.page_walked(state, query, offset, limit)
        return rows, total

    def page_walked(self, state: str, query: Query, offset: int, limit: int
                    ) -> tuple[list[Record], int, Walked | None]:
        plan = self._walk_plan(state, query)
        if plan is not None:
            return self._walked_page(state, query, *plan, offset, limit)
        if state in FINISHED_INDEX:
            if query.task or query.queue:
                return (*self._indexed_page(state, query, offset, limit), None)
            return (*self._finished_page(state, query, offset, limit), None)
        large = self._large_waiting(state, query)
        if large is not None:
            keys, sizes = large
            ids = list(self._in_index_order(keys, sizes, query.oldest_first, offset, limit))
            return self._summary_records(ids), sum(sizes), None
        ordered = self._ordered(state, query)
        return self._summary_records(ordered[offset:offset + limit]), len(ordered), None

    def candidates(self, state: str, query: Query) -> Iterable[Record]:
        if query.text_limit is not None or state in FINISHED_INDEX:
            # A search window of a task or a time range: walk the indexes (as a large
            # listing pages them) keeping the filters' jobs, and stop at the window, instead
            # of reading every record of the state to order it by time (issue #28).
            plan = self._walk_plan(state, query)
            if plan is not None:
                return WalkedRecords(self._walked_window(state, query, *plan), plan[1])
        if state in FINISHED_INDEX:
            return self._finished_records(state, query)
        large = self._large_waiting(state, query)
        if large is not None:
            keys, sizes = large
            count = sum(sizes) if query.text_limit is None else query.text_limit + 1
            return self._whole_records(
                list(self._in_index_order(keys, sizes, query.oldest_first, 0, count)), state)
        return self._whole_records(self._ordered(state, query), state)

    def _walk_plan(self, state: str, query: Query) -> tuple[list[Span], Walk] | None:
        """What a walk of the query reads, in its order, and its tally; None when no walk is
        needed: a waiting state's task or time filter over more than ORDERED_MAX jobs walks
        its indexes; a finished state's task or queue filter walks the state's sorted set
        (its score range: the time filter) while the listing index is behind, which a
        bounded sync tells (``_sync_index``)."""
        if state in FINISHED_INDEX:
            if not (query.task or query.queue) or self._sync_index(state):
                return None
            spans = [self._finished_span(state, query)]
        else:
            large = self._large_unfiltered(state, query)
            if large is None:
                return None
            pairs = list(zip(*large, strict=True))
            spans = [(key, 0, size)
                     for key, size in (pairs if query.oldest_first else reversed(pairs))]
        return spans, Walk(sum(size for *_, size in spans), query.walk_limit,
                           building=state in FINISHED_INDEX)

    def _finished_span(self, state: str, query: Query) -> Span:
        """The part of a finished state's sorted set in the query's time range, from the end
        its order starts at."""
        key = self.key(FINISHED_INDEX[state])
        low = "-inf" if query.since_ms is None else query.since_ms
        high = "+inf" if query.until_ms is None else query.until_ms
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(key, low, high)
        if query.oldest_first:
            pipe.zcount(key, "-inf", f"({low}")
        else:
            pipe.zcount(key, f"({high}", "+inf")
        size, before = (int(n) for n in pipe.execute())
        return key, before, size

    def _walked_window(self, state: str, query: Query, spans: list[Span], walk: Walk
                       ) -> Iterator[Record]:
        """Whole records of the jobs the query's filters keep, in the walk's order, up to
        the query's ``text_limit`` and one more (all without one)."""
        ids = self._walk(state, query, spans, walk)
        count = None if query.text_limit is None else query.text_limit + 1
        yield from self._whole_records(list(itertools.islice(ids, count)), state)

    def _walked_page(self, state: str, query: Query, spans: list[Span], walk: Walk,
                     offset: int, limit: int) -> tuple[list[Record], int, Walked | None]:
        """A page of the jobs the query's filters keep, in the walk's order (a large waiting
        state's: as the listing without them pages it); its total counted up to CAPPED
        (shown ``10000+``, as the SQL stores count), so a page reads the indexes only as far
        as it and the count need, and no further than the query's ``walk_limit`` (then the
        total counts the matches of the part walked)."""
        ids = self._walk(state, query, spans, walk)
        matched = list(itertools.islice(ids, max(offset + limit, CAPPED)))
        total = CAPPED if len(matched) >= CAPPED else len(matched)
        return self._summary_records(matched[offset:offset + limit]), total, walk.walked()

    def _walk(self, state: str, query: Query, spans: Sequence[Span], walk: Walk
              ) -> Iterator[str]:
        """Ids of the jobs still in ``state`` that the query's task, queue and time filters
        keep, in the spans' order (each read backwards for newest first), found by Redis
        (``walk.lua``), WALK_CHUNK index members a call, as many as ``walk`` allows
        (``Query.walk_limit``; it tallies them). A finished state's time filter is its
        span's score range, not the jobs' enqueue times."""
        timed = state not in FINISHED_INDEX
        since = "" if not timed or query.since_ms is None else query.since_ms
        until = "" if not timed or query.until_ms is None else query.until_ms
        for key, first, size in spans:
            start, end = first, first + size
            while start < end:
                want = walk.allowance(min(WALK_CHUNK, end - start))
                if not want:
                    return
                read, ids = self._call("walk", key, start, start + want - 1,
                                       "" if query.oldest_first else "rev", query.task or "",
                                       since, until, state, query.queue or "")
                walk.examined += int(read)
                yield from (as_text(i) for i in ids)
                if int(read) < want:
                    break
                start += want

    def _large_unfiltered(self, state: str, query: Query
                          ) -> tuple[list[str], list[int]] | None:
        """:meth:`_large_waiting` of the query without its task and time filters, if it has
        one (None otherwise): the indexes a walk keeping the filters' jobs reads."""
        if not query.task and query.since_ms is None and query.until_ms is None:
            return None
        return self._large_waiting(state, replace(query, task=None, since_ms=None,
                                                  until_ms=None))

    def _large_waiting(self, state: str, query: Query
                       ) -> tuple[list[str], list[int]] | None:
        """The indexes of a waiting listing with more than ORDERED_MAX jobs and no filter its
        indexes cannot answer, and their sizes; None for any other listing."""
        if (state not in WAITING_BY_INDEX or query.task or query.since_ms is not None
                or query.until_ms is not None
                or (query.queue and not WAITING_BY_INDEX[state])):
            return None
        if state == "enqueued":
            keys = [self.key("q", q) for q in ([query.queue] if query.queue else self._queues())]
        elif state == "scheduled":
            keys = [self.key("sched")]
        else:
            keys = self._blocked_indexes()
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zcard(key)
        sizes = [int(n) for n in pipe.execute()]
        return (keys, sizes) if sum(sizes) > ORDERED_MAX else None

    def _in_index_order(self, keys: Sequence[str], sizes: Sequence[int], oldest_first: bool,
                        offset: int, count: int) -> Iterator[str]:
        """``count`` ids from ``offset`` of the indexes read one after the other, each in its
        own order (newest first: the indexes and each one read backwards)."""
        pairs = list(zip(keys, sizes, strict=True))
        read = self.client.zrange if oldest_first else self.client.zrevrange
        for key, size in (pairs if oldest_first else reversed(pairs)):
            if count <= 0:
                return
            if offset >= size:
                offset -= size
                continue
            end = min(size, offset + count)
            for start in range(offset, end, ID_CHUNK):
                yield from (as_text(i) for i in read(key, start, min(end, start + ID_CHUNK) - 1))
            count -= end - offset
            offset = 0

    def _ordered(self, state: str, query: Query) -> list[str]:
        """Ids of a waiting or running ``state`` in the query's filters, in the listing's
        order (``listing.listed``'s: by the state's time, then id): every record of the state
        is read, only the fields the filters and the order need (reading them all and
        building each record took 0.4 to 1 s at 9,500 waiting jobs)."""
        ids = self._index_ids(state, query)
        at = SORT_FIELD[time_field(state)]
        fields = ["st", at] + ["name"] * bool(query.task) + ["q"] * bool(query.queue)
        kept: list[tuple[int, str]] = []
        for job_id, rec in zip(ids, self._records(ids, fields), strict=True):
            if (rec.get("st") != state or (query.task and rec.get("name") != query.task)
                    or (query.queue and rec.get("q") != query.queue)):
                continue
            moment = int(rec.get(at) or 0)
            if query.matches_time(moment):
                kept.append((moment, job_id))
        kept.sort(reverse=not query.oldest_first)
        return [job_id for _, job_id in kept]

    def _summary_records(self, ids: Sequence[str]) -> list[Record]:
        """Listing rows of ``ids`` (in order; missing records left out), long texts cut by
        Redis (``summaries.lua``)."""
        out: list[Record] = []
        for chunk in batches(ids, 200):
            reply = self._call("summaries", LIST_TEXT + 1, PREVIEW_BYTES, *chunk)
            for job_id, values in zip(chunk, reply, strict=True):
                if values[0] is None:
                    continue
                raw = dict(zip(SUMMARY_REPLY, values, strict=False))
                if raw.get("msg") is not None:  # its size as published, not as stored
                    raw["msg"] = envelope_bytes(raw["msg"])
                    raw["msglen"] = len(raw["msg"])
                rec = {f: as_text(v) for f, v in raw.items() if v is not None}
                out.append(job_record(job_id, rec))
        return out

    def _whole_records(self, ids: Sequence[str], state: str) -> Iterator[Record]:
        """Whole records of ``ids`` still in ``state``, SEARCH_CHUNK at a time."""
        for chunk in batches(ids, SEARCH_CHUNK):
            records = self._records(chunk, SEARCH_FIELDS)
            if state == "blocked":  # which are parked by their rate group (summaries.lua)
                pipe = self.client.pipeline(transaction=False)
                for job_id, rec in zip(chunk, records, strict=True):
                    pipe.zscore(self.key("rblk", rec.get("rg") or ""), job_id)
                for rec, score in zip(records, pipe.execute(), strict=True):
                    if score is not None and rec.get("rg"):
                        rec["rp"] = "1"
            for job_id, rec in zip(chunk, records, strict=True):
                if rec.get("st") == state:
                    yield job_record(job_id, rec)

    def _finished_records(self, state: str, query: Query) -> Iterator[Record]:
        """Records of a finished state in the query's task/queue/time filters, in the
        listing's order, read SEARCH_CHUNK at a time (a text search stops reading at its
        ``text_limit``)."""
        low = "-inf" if query.since_ms is None else query.since_ms
        high = "+inf" if query.until_ms is None else query.until_ms
        count = -1 if query.text_limit is None else query.text_limit + 1
        order = "asc" if query.oldest_first else "desc"
        if query.task or query.queue:  # the listing index, caught up (``_walk_plan``)
            _, raw = self._call("index_page", FINISHED_INDEX[state], query.queue or "",
                                query.task or "", low, high, 0, count, order)
        elif query.oldest_first:
            raw = self.client.zrangebyscore(self.key(FINISHED_INDEX[state]), low, high,
                                            start=0, num=count)
        else:
            raw = self.client.zrevrangebyscore(self.key(FINISHED_INDEX[state]), high, low,
                                               start=0, num=count)
        ids = [as_text(i) for i in raw]
        for rec in self._whole_records(ids, state):
            if (not query.queue or rec.queue == query.queue) and (
                    not query.task or rec.name == query.task):
                yield rec

    def _finished_page(self, state: str, query: Query, offset: int, limit: int
                       ) -> tuple[list[Record], int]:
        """Newest-first page of a finished state's index, paged by Redis."""
        key = self.key(FINISHED_INDEX[state])
        low = "-inf" if query.since_ms is None else query.since_ms
        high = "+inf" if query.until_ms is None else query.until_ms
        total = int(self.client.zcount(key, low, high))
        if query.oldest_first:
            raw = self.client.zrangebyscore(key, low, high, start=offset, num=limit)
        else:
            raw = self.client.zrevrangebyscore(key, high, low, start=offset, num=limit)
        return self._summary_records([as_text(m) for m in raw]), total

    # -- the admin's listing index (lua/admin/index_*.lua) -------------------------------------
    def _sync_index(self, state: str) -> bool:
        """Index the members of ``state``'s index finished since the last sync, a bounded
        part (``listing_index.READ_BATCHES``); whether the index is caught up."""
        return listing_index.sync(self.client, self.prefix, self._scripts["index_sync"],
                                  FINISHED_INDEX[state], batches=listing_index.READ_BATCHES)

    def _indexed_page(self, state: str, query: Query, offset: int, limit: int
                      ) -> tuple[list[Record], int]:
        """A page of a finished state filtered by task and/or queue, from the listing index
        (caught up: ``_walk_plan``)."""
        index = FINISHED_INDEX[state]
        low = "-inf" if query.since_ms is None else query.since_ms
        high = "+inf" if query.until_ms is None else query.until_ms
        order = "asc" if query.oldest_first else "desc"
        for _ in range(3):
            total, raw_ids = self._call("index_page", index, query.queue or "", query.task or "",
                                        low, high, offset, limit, order)
            ids = [as_text(i) for i in raw_ids]
            records = self._records(ids, ("st", "q", "name"))
            stale = [(i, r) for i, r in zip(ids, records, strict=True)
                     if r.get("st") != state or (query.queue and r.get("q") != query.queue)
                     or (query.task and r.get("name") != query.task)]
            if not stale:
                break
            # A record that changed queue or task since it was indexed: out of these sets.
            pipe = self.client.pipeline(transaction=False)
            for job_id, _rec in stale:
                if query.queue:
                    pipe.zrem(self.key("ax", index, "q", query.queue), job_id)
                if query.task:
                    pipe.zrem(self.key("ax", index, "t", query.task), job_id)
            pipe.execute()
        return self._summary_records(ids), int(total)

    def _finished_per_queue(self, state: str) -> tuple[dict[str, int], int]:
        """Records of a finished state per queue, from the listing index, and how many it
        leaves out (the index is behind: ``listing_index.unindexed``)."""
        caught_up = self._sync_index(state)
        reply = self._call("index_counts", FINISHED_INDEX[state])
        left = 0 if caught_up else listing_index.unindexed(self.client, self.prefix,
                                                           FINISHED_INDEX[state])
        return {as_text(reply[i]): int(reply[i + 1]) for i in range(0, len(reply), 2)}, left

    def holder(self, lock: str) -> str | None:
        value = self.client.get(self.key("u", lock))
        return None if value is None else as_text(value)

    # -- changes (one script call each: the scripts re-check every job) ---------------------
    def _run(self, script: str, args: list[Any]) -> list[Outcome]:
        reply = self._call(script, *args)
        return [(as_text(reply[i]), as_text(reply[i + 1]), as_text(reply[i + 2]))
                for i in range(0, len(reply), 3)]

    @staticmethod
    def _scope_args(scope: Scope) -> list[Any]:
        return [scope.task or "", scope.queue or "",
                "" if scope.older_than_ms is None else scope.older_than_ms]

    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        return self._run("retry", [self.backend.backstop_ms, *self._scope_args(scope), *ids])

    def discard_one(self, job_id: str) -> Outcome:
        [outcome] = self._run("discard", [job_id])
        return outcome

    def cancel_one(self, job_id: str) -> Outcome:
        [outcome] = self._run("cancel", [job_id])
        return outcome

    def discard_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._run("discard", list(ids))

    def cancel_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._run("cancel", list(ids))

    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        reply = self._call("delete", state, *self._scope_args(scope), *ids)
        return [as_text(i) for i in reply]

    def select(self, state: str, scope: Scope) -> list[str]:
        """Ids of ``state`` (a finished state) in ``scope``, oldest first (a plain read)."""
        key = self.key(FINISHED_INDEX[state])
        if scope.ids is not None:
            # The chosen ids that are in the state's index now (the scripts re-check).
            pipe = self.client.pipeline(transaction=False)
            for job_id in scope.ids:
                pipe.zscore(key, job_id)
            ids = [job_id for job_id, score in zip(scope.ids, pipe.execute(), strict=True)
                   if score is not None]
            if scope.task is None and scope.queue is None:
                return ids
        elif scope.older_than_ms is None:
            ids = self._zall(key)
        else:
            cutoff = self.now_ms() - scope.older_than_ms
            ids = [as_text(m) for m in self.client.zrangebyscore(key, "-inf", cutoff)]
        if scope.task is None and scope.queue is None:
            return ids
        return [job_id for job_id, rec in zip(ids, self._records(ids, ("name", "q")), strict=True)
                if rec and (scope.task is None or rec.get("name") == scope.task)
                and (scope.queue is None or rec.get("q") == scope.queue)]

    # -- reads --------------------------------------------------------------------------
    def finished_since(self, since_ms: int) -> tuple[int, int]:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(self.key("done"), since_ms, "+inf")
        pipe.zcount(self.key("dead"), since_ms, "+inf")
        completed, failed = pipe.execute()
        return int(completed), int(failed)

    def finished_rows(self, since_ms: int, bucket_ms: int, buckets: int
                      ) -> list[tuple[str, int, int]]:
        pipe = self.client.pipeline(transaction=False)
        for state in ("completed", "failed"):
            for n in range(buckets):
                low = since_ms + n * bucket_ms
                pipe.zcount(self.key(FINISHED_INDEX[state]), low, f"({low + bucket_ms}")
        counts = iter(pipe.execute())
        return [(state, n, int(next(counts))) for state in ("completed", "failed")
                for n in range(buckets)]

    def wait_rows(self, since_ms: int, limit: int) -> list[tuple[int, str, int | None]]:
        # Finished jobs started since then finished since then too.
        ids = self._zall(self.key("lease"))
        for index in ("done", "dead"):
            ids += [as_text(m) for m in self.client.zrevrangebyscore(
                self.key(index), "+inf", since_ms, start=0, num=limit)]
        # A reserved job (claimed, its task not started: start mark -token) has not started.
        starts = [(int(rec.get("start") or 0), rec)
                  for rec in self._records(ids, ("q", "enq", "due", "start", "tok", "sm"))
                  if not _reserved(rec, check_state=False)]
        return [(start, rec.get("q", ""),
                 start - max(int(rec.get("enq") or 0), int(rec.get("due") or 0)))
                for start, rec in starts if start >= since_ms]

    def runtime_rows(self, since_ms: int, limit: int) -> list[tuple[int, str, int | None]]:
        ids = [as_text(m) for m in self.client.zrevrangebyscore(
            self.key("done"), "+inf", since_ms, start=0, num=limit)]
        return [(int(rec.get("fin") or 0), rec.get("q", ""),
                 int(rec["fin"]) - int(rec["start"]) if rec.get("start") and rec.get("fin")
                 else None) for rec in self._records(ids, ("q", "start", "fin"))]

    def lease_rows(self) -> list[tuple[str, int, int | None, int | None]]:
        leases: list[Any] = list(self.client.zrange(self.key("lease"), 0, -1, withscores=True))
        records = self._records([as_text(m) for m, _ in leases], ("st", "wk", "start"))
        return [(rec["wk"], 1, int(deadline), int(rec["start"]) if rec.get("start") else None)
                for (_, deadline), rec in zip(leases, records, strict=True)
                if rec.get("st") == "running" and rec.get("wk")]

    # -- status -------------------------------------------------------------------------
    def _queue_heads(self, queue: str) -> list[str]:
        """The first :data:`HEAD` ids of each priority band of ``queue``: where its
        longest-waiting jobs are (a band is served in publish order)."""
        key = self.key("q", queue)
        ids: list[str] = []
        low: float | str = "-inf"
        while True:
            first = self.client.zrangebyscore(key, low, "+inf", start=0, num=1,
                                              withscores=True)
            if not first:
                return ids
            high = (int(first[0][1]) // BAND + 1) * BAND
            ids += [as_text(m) for m in self.client.zrangebyscore(
                key, low, f"({high}", start=0, num=HEAD)]
            low = high

    def queue_depth_rows(self) -> list[DepthRow]:
        queues = self._queues()
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcard(self.key("q", queue))
        out: list[DepthRow] = []
        for queue, enqueued in zip(queues, (int(n) for n in pipe.execute()), strict=True):
            if enqueued:
                since = [max(int(rec.get("enq") or 0), int(rec.get("due") or 0))
                         for rec in self._records(self._queue_heads(queue), ("st", "enq", "due"))
                         if rec.get("st") == "enqueued"]
                out.append((queue, enqueued, min(since) if since else None))
        return out

    # -- the queue history (hash P:qhist: bucket ms -> "at ms|sample JSON") -------------
    keeps_history = True

    def history_rows(self, since_ms: int, until_ms: int) -> list[tuple[int, int, str]]:
        buckets = sorted(int(b) for b in self.client.hkeys(self.key("qhist"))
                         if since_ms <= int(b) <= until_ms)
        if not buckets:
            return []
        out: list[tuple[int, int, str]] = []
        for bucket, value in zip(buckets, self.client.hmget(self.key("qhist"), buckets),
                                 strict=True):
            if value is not None:
                at, _, sample = as_text(value).partition("|")
                out.append((bucket, int(at), sample))
        return out

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool:
        return bool(self._call("history_put", bucket_ms, f"{at_ms}|{sample}", keep_from_ms))

    def status_rows(self) -> StatusRows:
        depth: list[tuple[str, str, int]] = []
        waiting: list[dict[str, str]] = []
        for queue in self._queues():
            enqueued = int(self.client.zcard(self.key("q", queue)))
            if enqueued:
                depth.append((queue, "enqueued", enqueued))
                waiting += [rec for rec in self._records(self._queue_heads(queue),
                                                         ("st", "q", "enq", "due"))
                            if rec.get("st") == "enqueued"]
        per_queue, unindexed = self._finished_per_queue("failed")
        depth += [(queue, "failed", n) for queue, n in per_queue.items()]
        depth += [(rec["q"], "scheduled", 1)
                  for rec in self._records(self._zall(self.key("sched")), ("st", "q"))
                  if rec.get("st") == "scheduled"]
        blocked_groups: list[GroupRow] = []
        for index in self._blocked_indexes():
            group = index[len(self.key("blk")) + 1:]
            concurrency = index.startswith(self.key("blk", ""))  # not a rate group
            for rec in self._records(self._zall(index), ("st", "q", "enq", "due", "cl")):
                if rec.get("st") == "blocked":
                    depth.append((rec["q"], "blocked", 1))
                    waiting.append(rec)
                    if concurrency:
                        blocked_groups.append((group, 1, int(rec.get("cl") or 0)))
        # Slots in use: running jobs of a group that hold one of its slots (read from the
        # running jobs, not by scanning the keyspace for P:slot:* sets).
        running_ids = self._zall(self.key("lease"))
        running = [(i, r) for i, r in zip(
            running_ids, self._records(running_ids, ("st", "q", "cg", "cl", "tok", "sm")),
            strict=True) if r.get("st") == "running"]
        depth += [(rec["q"], "running", 1) for _, rec in running]
        depth += [(rec["q"], "reserved", 1) for _, rec in running if _reserved(rec)]
        pipe = self.client.pipeline(transaction=False)
        for job_id, rec in running:
            if rec.get("cg"):
                pipe.sismember(self.key("slot", rec["cg"]), job_id)
        holds = iter(pipe.execute())
        slots: list[GroupRow] = [(rec["cg"], 1, int(rec.get("cl") or 0)) for _, rec in running
                                 if rec.get("cg") and next(holds)]
        oldest = [(rec.get("q", ""), max(int(rec.get("enq") or 0), int(rec.get("due") or 0)))
                  for rec in waiting]
        return StatusRows(depth, oldest, blocked_groups, slots, unindexed)
