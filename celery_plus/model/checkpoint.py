"""Places where long admin work may stop: between the store calls of a bulk action (each
batch) and of a read made of several calls (each chunk).

The store code calls :func:`checkpoint` there; what it checks is set by whoever runs the
work (:func:`watching`: the dashboard's request deadline, ``celery_plus/admin/deadline.py``),
and it stops the work by raising. Outside such a block a checkpoint does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

_check: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "celery_plus_checkpoint", default=None)


def checkpoint() -> None:
    """Run the current check (it raises to stop the work); none: nothing."""
    check = _check.get()
    if check is not None:
        check()


@contextlib.contextmanager
def watching(check: Callable[[], None]) -> Iterator[None]:
    """Run the block with ``check`` called at each :func:`checkpoint`."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)
