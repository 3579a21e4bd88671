"""``celery-plus demo``: a real worker on the embedded SQLite store, showing each extension.

``celery_plus.demo.tasks`` holds the demo's app factory and tasks, ``celery_plus.demo.app`` the
app the demo's workers load (``-A celery_plus.demo.app``), ``celery_plus.demo.runner`` the
orchestration (workers, workload, live progress, summary, clean-up).
"""
