"""The third real project: a Django project like the "Definitive Guide to Celery and Django"
course's (``compat_suite/django_project``), written as a plain Celery project, run with its own
pytest-django tests under ``-W error::DeprecationWarning`` against a real prefork worker —
unchanged on plain Celery, import-swapped (``compat_suite/swap.py``) on each ``plus+`` store.

    python -m compat_suite.django_run                      # every configuration
    python -m compat_suite.django_run --config plus-postgres

Each run is one :class:`DjangoDeployment` (its own prefix for the three queues, the Redis keys
and the PostgreSQL schema, and a SQLite file for Django's database, which the tests' session
migrates; removed afterwards). The
project reads its deployment's values from the environment (``DJANGO_CELERY_<NAME>`` sets
``CELERY_<NAME>``), so its files stay as written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .configs import Config, Servers
from .project_run import ProjectDeployment, ProjectRun, main, run_project

DJANGO_PROJECT = Path(__file__).resolve().parent / "django_project"
#: The project's queues (``django_celery_example.celery.QUEUES``).
QUEUES = ("default", "high_priority", "low_priority")


class DjangoDeployment(ProjectDeployment):
    """The Django project deployed per ``config``: one prefork worker (two processes) on its
    three queues; results in django-celery-results' table."""

    project = DJANGO_PROJECT
    app_module = "django_celery_example"
    python_options = ("-W", "error::DeprecationWarning")

    @property
    def env(self) -> dict[str, str]:
        celery = {
            "BROKER_TRANSPORT_OPTIONS": json.dumps({"global_keyprefix": f"{self.prefix}:"}),
            # celery-plus's settings; plain Celery ignores them.
            "PLUS_KEY_PREFIX": self.prefix,
            "PLUS_PG_SCHEMA": self.prefix,
        }
        return {
            **super().env,
            **{f"DJANGO_CELERY_{k}": v for k, v in celery.items()},
            "DJANGO_SETTINGS_MODULE": "django_celery_example.settings",
            "DJANGO_DB_PATH": str(self.workdir / "django.sqlite3"),
            "CELERY_BROKER_URL": self.config.broker_url(self.servers, self.workdir),
            "CELERY_QUEUE_PREFIX": f"{self.prefix}.",
            "CELERY_LOG_FILE": str(self.workdir / "celery-file.log"),
            # The worker shows each deprecation in its log (the tests' -W makes them errors).
            "PYTHONWARNINGS": "default::DeprecationWarning",
        }

    def start(self, beat: bool = False) -> None:
        """Start the worker on the three queues; :meth:`run_tests` waits for it."""
        self.worker = self.start_worker("prefork", 2, [f"{self.prefix}.{q}" for q in QUEUES],
                                        wait=False)

    def run_tests(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The project's tests, started while the worker starts: their session migrates the
        database first, and what they publish waits in the queues until the worker is ready
        (which this waits for, raising if it exits first)."""
        with ThreadPoolExecutor(1) as pool:
            tests = pool.submit(super().run_tests, timeout)
            self.worker.wait_for_log(" ready.", timeout=60)
            return tests.result()


def run_django_project(config: Config, servers: Servers) -> ProjectRun:
    """Deploy the Django project per ``config``, run its tests, remove the deployment."""
    return run_project(DjangoDeployment, config, servers)


if __name__ == "__main__":
    sys.exit(main(DjangoDeployment, __doc__.split("\n\n")[0]))
