"""The SQLite store (the embedded default): :class:`~.backend.SQLiteBackend`, its admin
(:mod:`.admin`) and its schema (``schema.sql``)."""
