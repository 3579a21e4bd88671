"""Moving queues from plain Celery: ``celery-plus migrate-queue`` (:mod:`.migrate`, batches moved
by :mod:`.movers`, the same-server script ``migrate.lua``), the way back (``--back``:
:mod:`.back`), kombu's Redis layout
(:mod:`.layout`), and the legacy queues a mixed deployment keeps serving (:mod:`.legacy`).

Not to be confused with schema migrations (:mod:`celery_plus.stores.postgres.migrations`)."""
