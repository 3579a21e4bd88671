"""Defect 9 of issue 12: ``plus+postgresql://`` without the ``postgres`` extra says how to
install it instead of raising ``ModuleNotFoundError: psycopg``.

The driver is hidden from a fresh interpreter by an import hook (the test extra installs it);
``tests/deploy/processes/test_install.py`` covers a real bare install.
"""

from __future__ import annotations

import subprocess
import sys

HIDE_PSYCOPG = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('psycopg', 'psycopg_pool', 'psycopg_binary'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
"""

PUBLISH = """
from celery_plus import Celery
from celery.exceptions import ImproperlyConfigured
app = Celery('pg', broker='plus+postgresql://postgres@127.0.0.1:5432/test', set_as_current=False)
@app.task(name='pg.x')
def x(): pass
try:
    x.delay()
except ImproperlyConfigured as exc:
    print('ImproperlyConfigured:', exc)
"""


def test_publishing_without_psycopg_says_to_install_the_postgres_extra() -> None:
    proc = subprocess.run([sys.executable, "-c", HIDE_PSYCOPG + PUBLISH],
                          capture_output=True, text=True, timeout=60)
    assert "ImproperlyConfigured:" in proc.stdout, proc.stdout + proc.stderr
    assert "pip install 'celery-plus[postgres]'" in proc.stdout
    assert "ModuleNotFoundError" not in proc.stderr
