"""django-celery-results on a plus store (docs/addons.md): a real worker of a Django project
with ``result_backend="django-db"`` fills django-celery-results' table, a success and a
failure alike, as under plain Celery.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from .conftest import ROOT, wait_until

DCR_APP = "tests.deploy.e2e.dcr_proj"


def _row(db: str, task_id: str) -> tuple[str, str, str] | None:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT status, result, task_name FROM "
                            "django_celery_results_taskresult WHERE task_id = ?",
                            (task_id,)).fetchone()


@pytest.mark.long
def test_django_celery_results_stores_each_outcome(client, start_worker, tmp_path,
                                                   broker_kind):
    db = str(tmp_path / "results.db")
    env = {"PLUS_TEST_DCR_DB": db}
    subprocess.run([sys.executable, "-m", DCR_APP, "migrate"], check=True, cwd=ROOT,
                   env={**os.environ, **env}, timeout=120)
    start_worker(app=DCR_APP, env=env)
    ok = client.tasks["proj.add"].delay(2, 3)
    failed = client.tasks["proj.fail"].delay("no luck")
    done = wait_until(lambda: (a := _row(db, ok.id)) and (b := _row(db, failed.id)) and (a, b),
                      message="both results in django-celery-results' table")
    (status, result, name), (f_status, f_result, f_name) = done
    assert (status, json.loads(result), name) == ("SUCCESS", 5, "proj.add")
    assert (f_status, f_name) == ("FAILURE", "proj.fail")
    assert json.loads(f_result)["exc_type"] == "ValueError", f_result
