"""The two ways the app gives tasks their retry behaviour: a base class with ``autoretry_for``
and exponential back-off, and a decorator class that runs a task in a database transaction and
retries it on any error."""

import functools

from celery import Task, shared_task
from django.db import transaction


class BaseTaskWithRetry(Task):
    autoretry_for = (Exception,)
    retry_kwargs = {"max_retries": 5}
    retry_backoff = True
    retry_backoff_max = 8
    retry_jitter = False


class custom_celery_task:
    """``@custom_celery_task(max_retries=3)``: a bound ``shared_task`` whose body runs in
    ``transaction.atomic()`` and which retries (after ``countdown`` seconds) on any error."""

    EXCEPTIONS = (Exception,)

    def __init__(self, *args, countdown=1, **kwargs):
        self.task_args = args
        self.task_kwargs = kwargs
        self.countdown = countdown

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper_func(task, *args, **kwargs):
            try:
                with transaction.atomic():
                    return func(*args, **kwargs)
            except self.EXCEPTIONS as exc:
                raise task.retry(exc=exc, countdown=self.countdown) from exc

        return shared_task(*self.task_args, bind=True, **self.task_kwargs)(wrapper_func)
