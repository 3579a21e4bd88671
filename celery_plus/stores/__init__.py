"""Durable stores, one package each: ``redis``, ``postgres``, ``sqlite`` and ``memory`` (the
in-process reference store built from :mod:`celery_plus.model.rules`). Each holds its backend (the
operations the channel uses), its admin operations, its scripts or schema, and its connection
handling; docs/architecture.md shows how they fit."""
