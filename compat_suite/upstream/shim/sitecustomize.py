"""Put on ``PYTHONPATH`` by the upstream runner for ``plus+`` brokers only.

Celery's integration suite builds a plain ``celery.Celery`` app from its own conftest and
starts its worker in the pytest process (``celery.contrib.testing``); some tests start more
Python processes. kombu finds the ``plus`` transport once ``celery_plus.transport`` is
imported, so every Python process of a ``plus+`` run imports it here, before anything else.
No Celery file is changed and nothing else is patched: the suite's app, config and tests run
as Celery wrote them, with celery-plus as the transport.
"""

import celery_plus.transport  # noqa: F401  (registers plus+<url> broker URLs)
