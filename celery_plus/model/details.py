"""Failure details as every store can keep them: one cleaning rule at the store boundary.

A task's exception message is arbitrary text: ``str(exc)`` can hold lone surrogates (a file
name from ``os.listdir`` formatted into a ``ValueError``), NUL characters (which PostgreSQL
text cannot hold), or megabytes. Before any backend encodes a settle's details it passes them
through :func:`clean_detail`, so no detail can make a store reject the write — and with it the
other settles of the same batch.
"""

from __future__ import annotations

import json
from typing import Any

#: Longest kept text of one detail field (characters); longer text is cut with a marker.
TEXT_MAX = 65_536
TRUNCATED = "\u2026 [truncated: {n} characters in all]"


def exception_text(exc: BaseException) -> str:
    """``str(exc)``; for an exception whose ``__str__`` raises, its ``repr``, and when that
    raises too, a stand-in naming its type (a broken exception never stops a settle)."""
    for render in (str, repr):
        try:
            return render(exc)
        except Exception:  # user code: any error of it is the case handled here
            continue
    return f"<{type(exc).__name__} object: str() and repr() raised>"


def clean_text(value: Any, limit: int = TEXT_MAX) -> str:
    """``value`` as text every store accepts: valid UTF-8, no NUL, at most ``limit`` chars.

    Lone surrogates become ``\\udXXX`` escapes, NUL becomes ``\\x00`` (both visible, none
    lost), and over-long text keeps its head with a marker naming the full length.
    """
    text = value if isinstance(value, str) else str(value)
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if len(text) > limit:
        marker = TRUNCATED.format(n=len(text))
        text = text[:max(limit - len(marker), 0)] + marker
    return text


def clean_detail(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy of ``detail`` whose keys and values are clean text (see :func:`clean_text`).

    ``None`` and ``False`` are left out (the stores read them as absent), ``True`` is
    ``"true"`` (as JSON spells it), numbers and other objects become their text.
    """
    if not detail:
        return None
    out: dict[str, Any] = {}
    for key, value in detail.items():
        if value is None or value is False:
            continue
        out[clean_text(key, 256)] = "true" if value is True else clean_text(value)
    return out


def encode_detail(detail: dict[str, Any] | None) -> str | None:
    """``detail`` cleaned and encoded as JSON (None when there is none)."""
    cleaned = clean_detail(detail)
    return json.dumps(cleaned) if cleaned else None
