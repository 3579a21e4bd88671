"""Conformance: no failure detail can fail a settle batch (DESIGN §3.6; issue #11 defect 2).

Rules: a settle's failure details are stored whatever their text — lone surrogates (kept as
``\\udXXX`` escapes), NUL (kept as ``\\x00``), megabytes (cut with a marker naming the full
length), non-text values (kept as text) — and the other settles of the same batch (acks
taken in the same round trip, claims sent with it) all take effect.
"""

from __future__ import annotations

from typing import Any

import pytest

from celery_plus.model.store import Backend, Settle
from tests.inspectors import inspector_for

from .support import claim, history, ids, publish, record

POISON: dict[str, dict[str, Any]] = {
    "surrogate": {"exc_type": "ValueError", "exc_message": "bad name 'caf\udce9.txt'",
                  "traceback": "Traceback: \ud800"},
    "nul": {"exc_type": "ValueError", "exc_message": "bad\x00byte", "traceback": "tb\x00"},
    "huge": {"exc_type": "ValueError", "exc_message": "x" * 1_000_000, "traceback": "t" * 300_000},
    "odd types": {"exc_type": 42, "exc_message": {"nested": ["a", 1]}, "traceback": None,
                  "extra": True},
    "odd keys": {"exc_message": "ok", "\udce9\x00": "value"},
}


def _poison_batch(backend: Backend) -> dict[str, int]:
    publish(backend, "ack-1")
    for name in POISON:
        publish(backend, name)
    publish(backend, "ack-2")
    return {c.job_id: c.token for c in claim(backend, max_jobs=20).claims}


def _settles(tokens: dict[str, int]) -> list[Settle]:
    return ([Settle("ack-1", tokens["ack-1"], "ack")]
            + [Settle(name, tokens[name], "fail", {"reason": "task failed", **detail})
               for name, detail in POISON.items()]
            + [Settle("ack-2", tokens["ack-2"], "ack")])


def _check_stored(backend: Backend) -> None:
    from celery_plus.model.details import TEXT_MAX

    assert record(backend, "ack-1").state == "completed"
    assert record(backend, "ack-2").state == "completed"
    assert sorted(inspector_for(backend).ids_in_state("failed")) == sorted(POISON)
    assert not set(inspector_for(backend).ids_in_state("running")) & {"ack-1", "ack-2", *POISON}
    surrogate = record(backend, "surrogate")
    assert surrogate.exc_message == "bad name 'caf\\udce9.txt'"
    assert surrogate.traceback == "Traceback: \\ud800"
    assert record(backend, "nul").exc_message == "bad\\x00byte"
    huge = record(backend, "huge")
    assert len(huge.exc_message) == TEXT_MAX and huge.exc_message.endswith(
        "[truncated: 1000000 characters in all]")
    assert huge.exc_message.startswith("x" * 1000)
    odd = record(backend, "odd types")
    assert odd.exc_type == "42" and odd.exc_message == "{'nested': ['a', 1]}"
    assert history(backend, "nul")[-1]["exc_message"] == "bad\\x00byte"


def test_every_settle_of_a_batch_lands_whatever_its_details_hold(backend: Backend) -> None:
    tokens = _poison_batch(backend)
    dead = backend.settle(_settles(tokens))
    assert sorted(dead) == sorted((name, "task failed") for name in POISON)
    _check_stored(backend)


def test_settles_sent_with_a_claim_land_whatever_their_details_hold(backend: Backend) -> None:
    tokens = _poison_batch(backend)
    publish(backend, "next")
    result = claim(backend, settles=_settles(tokens))
    assert ids(result) == ["next"]
    assert sorted(result.dead_lettered) == sorted((name, "task failed") for name in POISON)
    _check_stored(backend)


@pytest.mark.parametrize("action", ["requeue", "reject"])
def test_poison_details_of_requeue_and_reject_are_kept_too(
        backend: Backend, action: str) -> None:
    publish(backend, "a")
    publish(backend, "b")
    got = {c.job_id: c.token for c in claim(backend).claims}
    backend.settle([Settle("a", got["a"], action, dict(POISON["surrogate"], reason="r\x00")),
                    Settle("b", got["b"], "ack")])
    assert record(backend, "b").state == "completed"
    assert record(backend, "a").state == ("enqueued" if action == "requeue" else "failed")
    assert history(backend, "a")[-1]["exc_message"] == "bad name 'caf\\udce9.txt'"
