"""The worker's entry point, as in Flask's docs: ``celery -A make_celery worker``."""

from flask_app import create_app

flask_app = create_app()
celery_app = flask_app.extensions["celery"]
