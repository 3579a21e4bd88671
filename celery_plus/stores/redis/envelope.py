"""The envelope as the compact Redis layout may store it: deflated against a fixed dictionary.

A waiting job's kombu envelope is about 0.9 KB of JSON of which most is the same text in every
message (the envelope's and Celery's header names, ``null``, ``"base64"`` …). With
``plus_redis_deflate`` the compact layout (``plus_redis_compact_records``) stores it
raw-deflated with :data:`DICTIONARY` as the preset dictionary, behind the mark :data:`MARK`, in
``P:m:{id}``: about a quarter of its size, for some µs of the publisher's CPU (see
docs/benchmarks.md); by default it stores the envelope as published. Lua never reads an
envelope's content, so only this module knows the format; every read of an envelope from
Redis goes through :func:`envelope_bytes`, which passes a stored JSON envelope (the default,
the hash layout, or a record of an earlier release) through unchanged.

The mark names the dictionary: :data:`DICTIONARY` must never change. A better one is a new
mark (``\\0z2``) beside this one, read by every release before any writes it.
"""

from __future__ import annotations

import zlib
from typing import Any

#: The first bytes of a deflated envelope (a JSON envelope starts with ``{``, never with NUL).
MARK = b"\x00z1"
#: Deflate's window: 4 KB holds the dictionary and the envelope text that refers to it.
WINDOW_BITS = 12
#: The preset dictionary of mark ``\0z1``: a Celery protocol 2 envelope with its values left
#: out, in the order kombu writes it (deflate finds the longest matches near its end).
DICTIONARY = (
    b'{"body": "W1tdLCB7fSwgeyJjYWxsYmFja3MiOiBudWxsLCAiZXJyYmFja3MiOiBudWxsLCAiY2hhaW4iOiBudWxs'
    b'LCAiY2hvcmQiOiBudWxsfV0=", "content-encoding": "utf-8", "content-type": "application/json", '
    b'"headers": {"lang": "py", "task": "", "id": "", "shadow": null, "eta": null, '
    b'"expires": null, "group": null, "group_index": null, "retries": 0, '
    b'"timelimit": [null, null], "root_id": "", "parent_id": null, "argsrepr": "()", '
    b'"kwargsrepr": "{}", "origin": "gen", "ignore_result": false, '
    b'"replaced_task_nesting": 0, "stamped_headers": null, "stamps": {}}, '
    b'"properties": {"correlation_id": "", "reply_to": "", "delivery_mode": 2, '
    b'"delivery_info": {"exchange": "", "routing_key": "celery"}, "priority": 0, '
    b'"body_encoding": "base64"}}'
)

# A compressor primed with the dictionary, copied for each envelope (cheaper than priming one).
_PRIMED = zlib.compressobj(1, zlib.DEFLATED, -WINDOW_BITS, 4, zlib.Z_DEFAULT_STRATEGY,
                           DICTIONARY)


def deflated(message: str | bytes) -> bytes:
    """``message`` as the compact layout stores it."""
    data = message.encode() if isinstance(message, str) else bytes(message)
    compressor = _PRIMED.copy()
    return MARK + compressor.compress(data) + compressor.flush()


def envelope_bytes(stored: Any) -> bytes:
    """The envelope a stored value holds (deflated or as published, bytes or str).

    A message published as raw bytes that happen to start with :data:`MARK` and stored in
    the hash (the default layout stores every message as it came) is not a deflate stream:
    it is returned as it is, so a malformed message still reaches the worker that
    dead-letters it.
    """
    data = stored.encode() if isinstance(stored, str) else bytes(stored)
    if not data.startswith(MARK):
        return data
    inflater = zlib.decompressobj(-WINDOW_BITS, DICTIONARY)
    try:
        inflated = inflater.decompress(data[len(MARK):]) + inflater.flush()
    except zlib.error:
        return data
    return inflated if inflater.eof and not inflater.unused_data else data


def envelope_or_none(stored: Any) -> bytes | None:
    """:func:`envelope_bytes`, None kept."""
    return None if stored is None else envelope_bytes(stored)
