"""The PostgreSQL store: :class:`~.backend.PostgresBackend` (each operation one call of a
PL/pgSQL function), its admin (:mod:`.admin`), its connection pool (:mod:`.pool`) and its schema
migrations (:mod:`.migrations`, files in ``sql/``)."""
