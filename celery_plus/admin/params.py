"""Values an operator types (query parameters, CLI options), parsed once with their bounds.

Every parser raises ``ValueError`` with a message naming the parameter, what it accepts and
(escaped, clipped) what it got: the dashboard answers 400 with it, the CLI exits 2 with it.
Nothing an operator types reaches a store unchecked: numbers are bounded (a page number of 20
digits overflowed SQLite), durations are bounded (a huge one overflowed ``timedelta``), and
text has no NUL (PostgreSQL refuses it) and is valid UTF-8.
"""

from __future__ import annotations

import datetime as dt
import re

from celery_plus.admin.text import visible

#: Highest page number a listing accepts (1000 per page: a billion rows).
MAX_PAGE = 1_000_000
#: Longest duration accepted (about 100 years).
MAX_DURATION_S = 100 * 365 * 86400.0
#: Longest filter or search text.
MAX_TEXT = 1000

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d{1,12}(?:\.\d{1,6})?)([smhdw]?)")


def shown(value: str, limit: int = 40) -> str:
    """A bad value as an error message quotes it: escaped and clipped."""
    text = visible(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_duration(text: str) -> float:
    """Seconds in ``"90"``, ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"``, ``"1w"``, ``"1h30m"``
    (at most :data:`MAX_DURATION_S`)."""
    value = text.strip().lower()
    if not value:
        raise ValueError("empty duration (e.g. 90s, 15m, 2h, 1d, 1h30m)")
    pos, total = 0, 0.0
    while pos < len(value):
        match = _DURATION.match(value, pos)
        if match is None or (not match.group(2) and match.end() != len(value)):
            raise ValueError(f"{shown(text)} is not a duration (e.g. 90s, 15m, 2h, 1d, 1h30m)")
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if total > MAX_DURATION_S:
        raise ValueError(f"{shown(text)} is too long a duration (at most 100 years)")
    return total


def parse_moment(text: str) -> dt.datetime | dt.timedelta:
    """An ISO 8601 time (naive = UTC) or a duration meaning that long ago."""
    try:
        return dt.timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{shown(text)} is neither a time (2025-01-31T12:00) nor an age "
                         "(15m, 2h, 1d)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    try:
        moment.timestamp()
    except (OverflowError, ValueError):
        raise ValueError(f"{shown(text)} is out of range") from None
    return moment


def parse_int(name: str, text: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high`` written in decimal digits."""
    value = text.strip()
    if not re.fullmatch(r"\+?\d{1,15}", value) or not low <= int(value) <= high:
        raise ValueError(f"{name}: expected a whole number from {low} to {high}, "
                         f"got {shown(text)}")
    return int(value)


def check_text(name: str, value: str | None, limit: int = MAX_TEXT) -> str | None:
    """A filter or an id as a store can take it: no NUL, valid UTF-8, not too long."""
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError(f"{name}: must not contain NUL characters (got {shown(value)})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name}: not valid UTF-8 text (got {shown(value)})") from None
    if len(value) > limit:
        raise ValueError(f"{name}: at most {limit} characters (got {len(value)})")
    return value


def check_page(page: int) -> int:
    if not 1 <= page <= MAX_PAGE:
        raise ValueError(f"page: expected a whole number from 1 to {MAX_PAGE}, got {page}")
    return page
