"""Capped counts: how many jobs the SQL stores count at most, and how such a count is shown.

Counting a state of a million rows takes the SQL stores a second (every row of the state's
index is read), so they count at most :data:`COUNT_CAP` + 1 rows of a state, of a queue's state
or of a listing: a count of :data:`CAPPED` means "more than :data:`COUNT_CAP`" and is shown as
``10000+`` (docs/admin.md, "Cost"). Redis counts from sorted-set sizes and reports exact
figures; one of exactly :data:`CAPPED` is shown the same way, which is still true.
"""

from __future__ import annotations

#: The most jobs a SQL store counts exactly.
COUNT_CAP = 10_000
#: The count reported for more than COUNT_CAP jobs.
CAPPED = COUNT_CAP + 1


def is_capped(count: int) -> bool:
    """Whether ``count`` stands for "more than COUNT_CAP"."""
    return count == CAPPED


def count_text(count: int) -> str:
    """``count`` as pages show it: ``10000+`` for a capped count."""
    return f"{COUNT_CAP}+" if is_capped(count) else str(count)
