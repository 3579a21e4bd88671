"""Result backends for ``plus+<url>`` result URLs.

Celery's ``celery.app.backends.by_url`` splits ``plus+sqlite:///f.db`` into the backend alias
``plus`` and the URL ``sqlite:///f.db``. Importing this package (``celery_plus`` does) maps the
alias to :class:`PlusResultBackend`, which picks the backend from the inner scheme:

* ``plus+sqlite:////abs/path.db`` (four slashes; three for a path relative to the working
  directory) — :class:`~celery_plus.result_backends.sqlite.SQLiteResultBackend`, results in a
  table of the embedded store's file;
* ``plus+redis://…`` / ``plus+rediss://…`` — Celery's own ``RedisBackend`` (so
  ``backend="plus+redis://…"`` behaves exactly as ``redis://…``).
"""

from __future__ import annotations

from typing import Any

from celery.app.backends import BACKEND_ALIASES
from celery.exceptions import ImproperlyConfigured
from kombu.utils.url import maybe_sanitize_url

from celery_plus.result_backends.sqlite import SQLiteResultBackend

ALIAS = "plus"
SCHEMES = ("sqlite", "redis", "rediss")


class PlusResultBackend(SQLiteResultBackend):
    """Dispatches on the inner URL scheme: an instance of the matching backend class."""

    def __new__(cls, app: Any = None, url: str | None = None, **kwargs: Any) -> Any:
        scheme = (url or "").partition("://")[0]
        if scheme in ("redis", "rediss"):
            from celery.backends.redis import RedisBackend

            return RedisBackend(app=app, url=url, **kwargs)
        if scheme == "sqlite":
            return SQLiteResultBackend(app=app, url=url, **kwargs)
        raise ImproperlyConfigured(
            f"result_backend 'plus+{maybe_sanitize_url(url or '')}': unsupported store "
            f"{scheme!r}. Use one of: {', '.join('plus+' + s + '://' for s in SCHEMES)}."
        )


def register() -> None:
    """Make ``plus+<url>`` result backend URLs resolve to :class:`PlusResultBackend`."""
    BACKEND_ALIASES[ALIAS] = "celery_plus.result_backends:PlusResultBackend"


register()

__all__ = ["PlusResultBackend", "SQLiteResultBackend", "register"]
