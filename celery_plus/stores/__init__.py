"""Durable stores, one package each. The in-process reference store (``memory``) lives here;
the Redis, PostgreSQL and SQLite stores are in ``celery_plus.transport`` for now."""
