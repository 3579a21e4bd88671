"""Meeting other tools: ``celery_plus.contrib.pytest`` (fixtures), ``.flower`` (Flower's broker
page and queue lengths from the store), ``.opentelemetry`` (celery-plus's span attributes)."""
