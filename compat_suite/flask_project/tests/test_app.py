"""The app's own tests, through Flask's test client and a real worker."""

from celery import Celery
from flask import Flask
from flask.testing import FlaskClient

from flask_app import tasks

from .conftest import wait_for_result


def test_the_celery_app_is_the_flask_apps_extension(app: Flask) -> None:
    celery_app = app.extensions["celery"]
    assert isinstance(celery_app, Celery)
    assert celery_app.main == app.name
    assert tasks.add.app is celery_app  # shared_task bound to the default app
    assert "FlaskTask" in [k.__name__ for k in tasks.add.__class__.__mro__]


def test_the_index_renders_the_forms(client: FlaskClient) -> None:
    page = client.get("/").get_data(as_text=True)
    assert 'action="/add"' in page and 'name="a"' in page and 'action="/greet"' in page


def test_the_form_enqueues_and_the_result_arrives(client: FlaskClient) -> None:
    response = client.post("/add", data={"a": "2", "b": "3"})
    assert response.status_code == 200
    result = wait_for_result(client, response.get_json()["result_id"])
    assert result == {"ready": True, "successful": True, "value": 5, "state": "SUCCESS"}


def test_a_task_runs_inside_the_flask_app_context(client: FlaskClient) -> None:
    response = client.post("/greet", data={"name": "Ada"})
    result = wait_for_result(client, response.get_json()["result_id"])
    assert result["value"] == "Hello, Ada! (flask_app)"


def test_a_failing_task_reports_its_error(client: FlaskClient) -> None:
    response = client.post("/divide", data={"a": "1", "b": "0"})
    result = wait_for_result(client, response.get_json()["result_id"])
    assert result["ready"] and result["successful"] is False
    assert result["state"] == "FAILURE" and "ZeroDivisionError" in result["value"]


def test_bad_input_enqueues_nothing(client: FlaskClient) -> None:
    assert client.post("/add", data={"a": "two", "b": "3"}).status_code == 400
    assert client.post("/greet", data={"name": " "}).status_code == 400


def test_many_submissions_each_get_their_own_result(client: FlaskClient) -> None:
    ids = [client.post("/add", data={"a": str(n), "b": "1"}).get_json()["result_id"]
           for n in range(20)]
    assert len(set(ids)) == 20
    assert [wait_for_result(client, i)["value"] for i in ids] == [n + 1 for n in range(20)]
