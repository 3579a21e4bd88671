"""proj as a Django project: Django settings (``djsite.settings``) holding Celery's settings
under the ``CELERY_`` namespace, and an app (``notes``) with a model and a task using
``delay_on_commit``. A deployment is a Django one when ``DJANGO_SETTINGS_MODULE`` is set."""
