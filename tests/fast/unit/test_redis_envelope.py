"""The compact layout's envelope format (``stores/redis/envelope.py``): pure logic."""

from __future__ import annotations

import hashlib
import json

import pytest

from celery_plus.stores.redis.envelope import DICTIONARY, MARK, deflated, envelope_bytes

ENVELOPE = json.dumps({
    "body": "W1sxXSwge30sIHt9XQ==", "content-encoding": "utf-8",
    "content-type": "application/json",
    "headers": {"lang": "py", "task": "proj.add", "id": "6f1c0c8e-27a4-4a39-9d6c-1f0c2b6f9a11",
                "argsrepr": "(1,)", "kwargsrepr": "{}", "retries": 0},
    "properties": {"delivery_info": {"exchange": "", "routing_key": "celery"},
                   "priority": 0, "body_encoding": "base64"}})


@pytest.mark.parametrize("message", [
    ENVELOPE, ENVELOPE.encode(), "", b"", "\x00z1 starts with the mark", "é\U0001f600 \x1f\x1e",
    b"\xff\xfe not utf-8 \x00", "x" * 1_000_000,
])
def test_what_is_deflated_comes_back_byte_for_byte(message: str | bytes) -> None:
    stored = deflated(message)
    assert stored.startswith(MARK)
    expected = message.encode() if isinstance(message, str) else message
    assert envelope_bytes(stored) == expected
    assert envelope_bytes(stored.decode("latin-1").encode("latin-1")) == expected


def test_an_envelope_is_stored_in_a_fraction_of_its_size() -> None:
    assert len(deflated(ENVELOPE)) < len(ENVELOPE) / 2


@pytest.mark.parametrize("stored", [
    ENVELOPE.encode(), ENVELOPE, b"", MARK, MARK + b"not a deflate stream",
    MARK + b"\xff" * 40, deflated(ENVELOPE) + b"trailing bytes", deflated(ENVELOPE)[:-3],
])
def test_anything_else_is_returned_as_it_was_stored(stored: str | bytes) -> None:
    expected = stored.encode() if isinstance(stored, str) else stored
    assert envelope_bytes(stored) == expected


def test_the_dictionary_of_mark_z1_never_changes() -> None:
    # Stored envelopes are inflated with it: a change makes every stored one unreadable.
    assert hashlib.sha256(DICTIONARY).hexdigest()[:16] == "7bba7b36569ff2bd"
