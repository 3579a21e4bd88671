"""PostgreSQL array literals written directly (``{"a","b"}``), for statements that take a
batch as arrays.

psycopg adapts a Python list element by element in Python (a regular expression per string):
about 14 ms for the 17 arrays of a 500-job ``publish_batch``, more than the statement itself.
These write the same arrays' text form with ``str`` methods, for the ``%s::text[]``-style
parameters of such statements.
"""

from __future__ import annotations

from collections.abc import Iterable


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[str | None]) -> str:
    """A ``text[]`` literal of ``values`` (``None`` is NULL)."""
    return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"


def int_array(values: Iterable[int | None]) -> str:
    """An ``integer[]`` / ``bigint[]`` literal of ``values`` (``None`` is NULL)."""
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


def bytea_array(values: Iterable[bytes]) -> str:
    """A ``bytea[]`` literal of ``values``, each in hex form."""
    return "{" + ",".join('"\\\\x' + v.hex() + '"' for v in values) + "}"
