"""Dead letters grouped by error: the group key, its normalization and the values returned.

A dead letter's group is its exception type (its first :data:`MESSAGE_CHARS` characters) and
its *normalized* message: the message's first line (up to the first ``\\n``), then its first
:data:`MESSAGE_CHARS` characters. Every
store computes the same key (SQL ``substr``/``instr`` on SQLite, ``split_part``/``left`` on
PostgreSQL, ``lua/admin/error_groups_sync.lua`` on Redis, :func:`normalize` here), so a group
listed by one call is found again by the next.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

#: Characters of the message's first line a group keeps.
MESSAGE_CHARS = 200
#: Groups a listing returns at most (the largest first).
MAX_GROUPS = 1000


def normalize(message: str | None) -> str:
    """The group's message of a dead letter whose error message is ``message``."""
    return (message or "").split("\n", 1)[0][:MESSAGE_CHARS]


def group_type(exc_type: str | None) -> str:
    """The group's exception type (cut like the message: a type name is short anyway)."""
    return (exc_type or "")[:MESSAGE_CHARS]


def group_id(exc_type: str, message: str) -> str:
    """A short stable name of the group (its key on Redis; URLs may use it)."""
    raw = f"{exc_type}\n{message}".encode("utf-8", "surrogateescape")
    return hashlib.sha1(raw).hexdigest()


@dataclass(frozen=True)
class ErrorGroup:
    """Dead letters of one exception type and normalized message."""

    exc_type: str
    message: str
    count: int
    #: Finish (dead-letter) times of its oldest and newest member, ms since the epoch.
    oldest_ms: int
    newest_ms: int

    @property
    def id(self) -> str:
        return group_id(self.exc_type, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "id": self.id}


@dataclass(frozen=True)
class ErrorGroups:
    """The groups of the dead letters, the largest first (``total``: how many groups)."""

    groups: list[ErrorGroup]
    total: int
    #: The groups were found among this many newest dead letters (None: among all); each
    #: one's count is then capped as every SQL count (model/capped.py).
    sampled: int | None = None
    #: Dead letters the store's group index has not read yet (Redis builds it a bounded
    #: step per read, the oldest first): the groups count the others. 0: every one counted.
    unindexed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "sampled": self.sampled, "unindexed": self.unindexed,
                "groups": [g.to_dict() for g in self.groups]}


def ordered(groups: list[ErrorGroup], limit: int) -> ErrorGroups:
    """The ``limit`` largest of ``groups`` (ties: newest first, then by name)."""
    groups = sorted(groups, key=lambda g: (-g.count, -g.newest_ms, g.exc_type, g.message))
    return ErrorGroups(groups[:limit], len(groups))
