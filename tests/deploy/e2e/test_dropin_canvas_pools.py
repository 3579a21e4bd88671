"""Issue 12: canvas whose members have extension options, on prefork and gevent workers
(``test_dropin_canvas.py`` runs each case on the threads pool).

One worker per pool and store runs every case in turn: nested chords with a coalesced
member, chords sharing a unique body, a chord whose unique body follows a pending holder
(with a link, and chained on), a unique body chained on, ``unique_by`` members,
members with a countdown, ``Task.replace`` by a unique task inside a chain (with and without
a pending holder), a unique or concurrency-limited task replacing itself,
``starmap``/``chunks`` of a unique task, ``concurrency_key`` members of a chord, and a chord
whose member follows a failing holder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import chain, chord, group
from celery.exceptions import ChordError

from tests.deploy.matrix import pools

from . import dropin_fixtures
from .conftest import Worker, wait_until
from .proj import events

APP = dropin_fixtures.APP
client = dropin_fixtures.client

TIMEOUT = 60


@pytest.fixture
def worker(start_worker: Callable[..., Worker], pool: str) -> Worker:
    return start_worker(app=APP, pool=pool, concurrency=4 if pool == "gevent" else 3)


def _ran(prefix: str, kind: str, n: int) -> int:
    return sum(1 for e in events(prefix, kind) if e["n"] == n)


# Each store's canvas path also runs in ``test_dropin_canvas.py`` on the threads pool.
@pools("prefork", "gevent")
def test_canvas_with_extension_options_completes(
        client: Any, worker: Worker, prefix: str) -> None:
    t = client.tasks
    uniq, ub, usum = t["dropin.uniq"], t["dropin.uniq_by"], t["dropin.uniq_sum"]
    add, tsum, limited_by = t["proj.add"], t["proj.tsum"], t["dropin.limited_by"]

    # A nested chord whose inner and outer headers share a unique member.
    inner = chord([uniq.s(11), uniq.s(12)], tsum.s())
    assert chord([uniq.s(11), inner], tsum.s()).apply_async().get(timeout=TIMEOUT) == 340
    assert _ran(prefix, "uniq", 11) == 1

    # Two chords whose unique bodies get the same arguments; a unique body chained on.
    first = chord([add.s(1, 1), add.s(2, 2)])(usum.s())
    second = chord([add.s(1, 1), add.s(2, 2)])(usum.s())
    chained = chain(group(add.s(3, 3), add.s(4, 4)), usum.s(), add.s(100)).apply_async()
    assert (first.get(timeout=TIMEOUT), second.get(timeout=TIMEOUT)) == (6, 6)
    assert chained.get(timeout=TIMEOUT) == 114

    # A chord whose unique body coalesces into a pending holder: the body's id follows it,
    # its link runs, and a chain goes on from it.
    holder = usum.apply_async(([2, 4],), countdown=3)
    result = chord([add.s(1, 1), add.s(2, 2)])(usum.s().set(link=t["proj.mark"].si(23)))
    assert result.get(timeout=TIMEOUT) == 6 and result.id != holder.id
    assert holder.get(timeout=TIMEOUT) == 6
    wait_until(lambda: _ran(prefix, "mark", 23) == 1, timeout=TIMEOUT,
               message="the body's link ran")
    holder = usum.apply_async(([3, 5],), countdown=3)
    result = (chord([add.s(1, 2), add.s(2, 3)], usum.s()) | add.s(100)).apply_async()
    assert result.get(timeout=TIMEOUT) == 108 and holder.get(timeout=TIMEOUT) == 8

    # unique_by members: the key is n only.
    result = group(ub.s(13, "a"), ub.s(13, "b"), ub.s(14, "c")).apply_async()
    assert result.get(timeout=TIMEOUT) == [130, 130, 140]
    assert _ran(prefix, "uniq_by", 13) == 1

    # Members with a countdown, set per member and for the whole group.
    result = group(uniq.s(21).set(countdown=1), uniq.s(21).set(countdown=1)).apply_async()
    assert result.get(timeout=TIMEOUT) == [210, 210]
    result = group(uniq.s(22), uniq.s(22)).apply_async(countdown=1)
    assert result.get(timeout=TIMEOUT) == [220, 220]
    assert _ran(prefix, "uniq", 21) == 1 and _ran(prefix, "uniq", 22) == 1

    # Task.replace by a unique task inside a chain, alone and while its key is held.
    replaced = t["dropin.replaced_by_uniq"]
    assert chain(replaced.s(16), add.s(1)).apply_async().get(timeout=TIMEOUT) == 161
    holder = uniq.apply_async((15,), countdown=2)
    assert chain(replaced.s(15), add.s(1)).apply_async().get(timeout=TIMEOUT) == 151
    assert holder.get(timeout=TIMEOUT) == 150 and _ran(prefix, "uniq", 15) == 1

    # A unique task replacing itself (the replacement takes over its id), alone, in a chain
    # and as duplicate group members; then its key is free again.
    replacing = t["dropin.uniq_replacing"]
    assert chain(replacing.s(6), add.s(10)).apply_async().get(timeout=TIMEOUT) == 17
    result = group(replacing.s(7), replacing.s(7), replacing.s(8)).apply_async()
    assert result.get(timeout=TIMEOUT) == [8, 8, 9]
    again = replacing.delay(7)
    assert not again.deduplicated and again.get(timeout=TIMEOUT) == 8
    # A concurrency-limited task replaced by another, in a chord.
    limited_replacing = t["dropin.limited_replacing"]
    members = [limited_replacing.s(1), limited_replacing.s(2)]
    assert chord(members)(tsum.s()).get(timeout=TIMEOUT) == 3

    # starmap and chunks call the task in the worker, as Celery does.
    assert uniq.starmap([(17, 0), (17, 0)]).apply_async().get(timeout=TIMEOUT) == [170, 170]
    chunks = uniq.chunks([(18, 0), (19, 0)], 1).group().apply_async()
    assert chunks.get(timeout=TIMEOUT) == [[180], [190]]

    # concurrency_key members of a chord.
    members = [limited_by.s("a", 1), limited_by.s("a", 2), limited_by.s("b", 3),
               limited_by.s("b", 4)]
    assert chord(members)(tsum.s()).get(timeout=TIMEOUT) == 10

    # A chord member following a failing holder fails the chord.
    failing = t["dropin.uniq_fail"]
    holder = failing.delay(31)
    result = chord([failing.s(31), add.s(1, 1)])(tsum.s())
    with pytest.raises((ChordError, ValueError)):
        result.get(timeout=TIMEOUT)
    with pytest.raises(ValueError):
        holder.get(timeout=TIMEOUT)
    assert _ran(prefix, "uniq_fail", 31) == 1
