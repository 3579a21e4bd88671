"""The Flask app and its test client, on the broker and result backend the environment
names (a worker of ``make_celery`` must be running on them)."""

import time

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app import create_app


@pytest.fixture
def app() -> Flask:
    app = create_app()
    app.config.update(TESTING=True)
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def wait_for_result(client: FlaskClient, result_id: str, timeout: float = 20) -> dict:
    """Poll the result view until the task is ready."""
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/result/{result_id}").get_json()
        if body["ready"] or time.monotonic() > deadline:
            return body
        time.sleep(0.05)
