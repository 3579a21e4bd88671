"""The deployments the suite compares: plain Celery (the reference) and celery-plus per store."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

#: The worker pools the suite runs (Celery's default first).
POOLS = ("prefork", "threads", "gevent", "solo")


@dataclass(frozen=True)
class Servers:
    """Where the shared services are (every deployment isolates itself on them)."""

    redis: str = "redis://127.0.0.1:6379"
    postgres: str = "postgresql://postgres@127.0.0.1:5432/test"

    def redis_db(self, db: int) -> str:
        return f"{self.redis.rstrip('/')}/{db}"


@dataclass(frozen=True)
class Config:
    """One way of running the project."""

    name: str
    #: ``celery`` (plain Celery, the project unchanged) or ``celery-plus`` (imports swapped).
    cli: str
    #: Which store the broker URL points at: redis, sqlite or postgres.
    store: str
    doc: str
    #: The worker's pool.
    pool: str = "prefork"
    #: The project deployed as a Django project (``djsite``, DJANGO_SETTINGS_MODULE).
    django: bool = False

    @property
    def plus(self) -> bool:
        return self.cli == "celery-plus"

    def variant(self, pool: str = "prefork", django: bool = False) -> Config:
        """This configuration on another pool and/or as a Django project; the name says so
        (``plus-redis/gevent``, ``celery-redis/django``, ``plus-sqlite/solo+django``)."""
        if (pool, django) == ("prefork", False):
            return self
        suffix = "+".join(([pool] if pool != "prefork" else []) + (["django"] if django else []))
        extra = ", ".join(([f"{pool} pool"] if pool != "prefork" else [])
                          + (["as a Django project"] if django else []))
        return replace(self, name=f"{self.name}/{suffix}", doc=f"{self.doc}; {extra}",
                       pool=pool, django=django)

    def broker_url(self, servers: Servers, workdir: Path) -> str:
        if self.store == "sqlite":
            return f"plus+sqlite:///{(workdir / 'broker.db').as_posix()}"
        url = servers.postgres if self.store == "postgres" else servers.redis_db(0)
        return f"plus+{url}" if self.plus else url


REFERENCE = Config("celery-redis", "celery", "redis",
                   "plain Celery, the project unchanged, redis:// broker (the reference)")
CONFIGS: dict[str, Config] = {c.name: c for c in (
    REFERENCE,
    Config("plus-redis", "celery-plus", "redis", "celery-plus, imports swapped, plus+redis://"),
    Config("plus-sqlite", "celery-plus", "sqlite",
           "celery-plus, imports swapped, plus+sqlite:///<tmp file>"),
    Config("plus-postgres", "celery-plus", "postgres",
           "celery-plus, imports swapped, plus+postgresql:// (own schema per run)"),
)}
