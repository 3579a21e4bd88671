"""Key derivation for uniqueness and concurrency (seed reference §2).

This module owns the byte-exact canonical JSON writer, the payload digest (BLAKE2b-128), the
unique-key format (``args:<32 hex digits>`` for whole-payload keys, ``field=<json>`` joined by
U+001F for ``unique_by``) and the concurrency scope.  Everything here is pure and deterministic so
the same payload yields the same key in every process.  The seed hashed with 64-bit FNV-1a
(``args:<16 hex digits>``): slow in pure Python and collidable on purpose by whoever controls a
payload; keys of that form live on only in records stored before the change (docs/options.md).
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence

__all__ = ["canonical_json", "concurrency_scope", "payload_digest", "unique_key"]

#: Digest size of the whole-payload key, in bytes: BLAKE2b-128, 32 hex digits.
DIGEST_BYTES = 16

#: Field separator for ``unique_by`` keys (U+001F, "unit separator").
UNIT_SEPARATOR = "\x1f"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_string(text: str) -> str:
    """Quote and escape ``text`` exactly like serde_json (raw non-ASCII, lowercase ``\\u00xx``).

    Lone surrogates (a Rust string cannot hold them; a Python one can, e.g. a file name from
    ``os.listdir``) are written as ``\\udXXX`` escapes, so a key is always valid UTF-8 that
    every store accepts.
    """
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isascii():
        return quoted
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _format_float(value: float) -> str:
    """Lay out a float like serde_json/ryu; non-finite values become ``null``."""
    if not math.isfinite(value):
        return "null"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    # repr() gives the shortest round-trip digits; only its layout differs from ryu's.
    _, digit_tuple, exponent = decimal.Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    assert isinstance(exponent, int)  # finite, so never 'n'/'N'/'F'
    exponent += len(digit_tuple) - len(digits)  # account for the stripped zeros
    length = len(digits)
    kk = length + exponent  # 10**(kk-1) <= |value| < 10**kk
    if length <= kk <= 16:
        body = digits + "0" * (kk - length) + ".0"
    elif 0 < kk <= 16:
        body = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        body = "0." + "0" * -kk + digits
    elif length == 1:
        body = f"{digits}e{kk - 1}"
    else:
        body = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + body


def _key_string(key: object) -> str:
    """Convert a mapping key to a string the way :func:`json.dumps` does."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        if math.isnan(key):
            return "NaN"
        if math.isinf(key):
            return "Infinity" if key > 0 else "-Infinity"
        return float.__repr__(key)
    raise TypeError(
        f"cannot build a canonical JSON key from a mapping key of type {type(key).__name__}: "
        "unique/concurrency keys need JSON-serialisable arguments "
        "(mapping keys must be str, int, float, bool or None)"
    )


def _write(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif isinstance(value, bool):  # before int: bool is an int subclass
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_format_float(value))
    elif isinstance(value, str):
        out.append(_json_string(value))
    elif isinstance(value, Mapping):
        entries = [(_key_string(k), canonical_json(v)) for k, v in value.items()]
        entries.sort()  # code-point order; ties (e.g. 1 and "1") broken by value
        out.append("{")
        out.append(",".join(f"{_json_string(k)}:{v}" for k, v in entries))
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, (set, frozenset)):
        out.append("[" + ",".join(sorted(canonical_json(item) for item in value)) + "]")
    elif isinstance(value, (datetime.date, datetime.time)):  # datetime is a date subclass
        out.append(_json_string(value.isoformat()))
    elif isinstance(value, (uuid.UUID, decimal.Decimal)):
        out.append(_json_string(str(value)))
    else:
        raise TypeError(
            f"cannot build canonical JSON for a value of type {type(value).__name__}: "
            "unique/concurrency keys need JSON-serialisable arguments"
        )


def canonical_json(value: object) -> str:
    """Serialise ``value`` as the seed's canonical JSON (sorted keys, no whitespace, ryu floats).

    Python extras: tuples are arrays, sets are arrays sorted by their elements' canonical JSON,
    dates/times use ``isoformat()``, UUIDs and Decimals use ``str()``.  Raises ``TypeError`` for
    anything else.
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def payload_digest(text: str) -> str:
    """BLAKE2b-128 of the UTF-8 bytes of ``text``, as 32 lowercase hex digits."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                           digest_size=DIGEST_BYTES).hexdigest()


def _field(payload: object, name: str) -> object:
    return payload.get(name) if isinstance(payload, Mapping) else None


def unique_key(payload: Mapping[str, object] | object, by: Sequence[str] | None) -> str:
    """Unique key of ``payload``: ``args:<digest>`` or ``f=<json>`` per ``by`` field."""
    if not by:
        return f"args:{payload_digest(canonical_json(payload))}"
    return UNIT_SEPARATOR.join(f"{name}={canonical_json(_field(payload, name))}" for name in by)


def concurrency_scope(payload: Mapping[str, object] | object, key: str | None) -> str | None:
    """Concurrency scope: canonical JSON of ``payload[key]`` (``"null"`` if missing), or None."""
    if key is None:
        return None
    return canonical_json(_field(payload, key))
