"""Celery's own integration suite (``t/integration``) run against a ``plus+`` broker.

``python -m compat_suite.upstream --broker plus+redis`` fetches the sdist of the *installed*
Celery version (cached), runs its integration tests with ``TEST_BROKER`` set to the broker under
test and the Redis result backend on a ``redis-server`` of the run's own, and compares every
test's outcome with a plain ``redis://`` run (made in the same invocation, or a stored
baseline). See docs/compat.md, "Celery's own integration suite".

Modules: ``source`` (fetch and unpack the suite), ``servers`` (the run's own Redis, PostgreSQL
schema, SQLite file), ``runner`` (one pytest run of the suite on one broker), ``outcomes``
(results, baselines and their comparison), ``__main__`` (the command line).
"""
