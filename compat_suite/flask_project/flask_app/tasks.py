"""The app's tasks: ``@shared_task``, bound to whichever Celery app is the default (the one
``celery_init_app`` made), each run inside the Flask app context by ``FlaskTask``."""

from celery import shared_task
from flask import current_app


@shared_task(ignore_result=False)
def add(a: int, b: int) -> int:
    return a + b


@shared_task(ignore_result=False)
def greet(name: str) -> str:
    """Reads the Flask app's config: only works inside its app context."""
    return f"{current_app.config['GREETING']}, {name}! ({current_app.name})"


@shared_task(ignore_result=False)
def divide(a: int, b: int) -> float:
    return a / b

