"""The Redis store: :class:`~.backend.RedisBackend` (channel operations as Lua scripts in
``lua/``, loaded by :mod:`.scripts`), its admin (:mod:`.admin`, scripts in ``lua/admin/``) and its
connection handling (:mod:`.connect`)."""
