"""Testing helpers: ``celery_plus.contrib.pytest`` (fixtures)."""
