"""Where a ``sqlite:`` URL puts its database file: one reading for the broker and the results."""

from __future__ import annotations

from urllib.parse import unquote

from celery.exceptions import ImproperlyConfigured

FORM = "plus+sqlite:///relative/path.db or plus+sqlite:////absolute/path.db"


def sqlite_path(url: str, setting: str = "broker_url", shown: str | None = None,
                plain_path: bool = True) -> str:
    """The database file of a SQLAlchemy-style ``sqlite:`` URL (``plus+`` in front or not).

    ``sqlite:///relative/path.db`` (three slashes) is relative to the working directory,
    ``sqlite:////abs/path.db`` (four) is absolute. With ``plain_path`` a value without ``://``
    is a path and returned as is. A bad URL fails naming ``setting`` and the URL as the user
    wrote it (``shown``, by default ``url``), with the form to use.
    """
    named = f"{setting} {url if shown is None else shown!r}"
    scheme, sep, rest = url.removeprefix("plus+").partition("://")
    if not sep and plain_path:
        return url
    if not sep or scheme != "sqlite":
        raise ImproperlyConfigured(f"{named} is not a SQLite URL; use {FORM}.")
    rest = rest.partition("?")[0]
    if not rest.startswith("/"):
        raise ImproperlyConfigured(f"{named}: a SQLite URL names no host; use {FORM}.")
    path = unquote(rest[1:])
    if not path or path == ":memory:":
        raise ImproperlyConfigured(
            f"{named} names no database file (an in-memory database cannot be shared by "
            f"workers and the processes that publish or read results); use {FORM}.")
    return path
