"""A small Flask app with Celery tasks, as Flask's "Background Tasks with Celery" pattern
writes it: ``celery_init_app`` builds the Celery app from ``app.config["CELERY"]`` with a
``FlaskTask`` that runs every task inside the Flask app context, and stores it in
``app.extensions["celery"]``.

Configuration comes from the environment, Flask's way (``app.config.from_prefixed_env()``):
``FLASK_CELERY__broker_url=redis://…`` sets ``app.config["CELERY"]["broker_url"]``.
"""

from celery import Celery, Task
from flask import Flask


def celery_init_app(app: Flask) -> Celery:
    class FlaskTask(Task):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery_app = Celery(app.name, task_cls=FlaskTask)
    celery_app.config_from_object(app.config["CELERY"])
    celery_app.set_default()
    app.extensions["celery"] = celery_app
    return celery_app


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.from_mapping(
        CELERY=dict(
            broker_url="redis://127.0.0.1:6379/0",
            result_backend="redis://127.0.0.1:6379/1",
            task_ignore_result=True,
        ),
        GREETING="Hello",
    )
    app.config.from_prefixed_env()
    celery_init_app(app)

    from . import views

    app.register_blueprint(views.bp)
    return app
