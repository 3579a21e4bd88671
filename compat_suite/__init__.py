"""The compatibility suite: one Celery project, run on plain Celery and on celery-plus.

``compat_suite/project/`` is a Celery project written as a Celery user writes one (``proj``)
and the client code that uses it (``scenarios``), both importing from ``celery``.
``python -m compat_suite.run`` deploys it on plain Celery over ``redis://`` (the reference) and,
with its imports swapped to ``celery_plus``, on each durable store, runs every scenario on each
deployment and compares what each observed with the reference. See docs/compat.md.
"""
