"""The second real project: a Flask app with Celery tasks (``compat_suite/flask_project``,
Flask's "Background Tasks with Celery" pattern), written as a plain Celery project, run with
its own pytest tests (Flask's test client) against a real worker — unchanged on plain Celery,
import-swapped (``compat_suite/swap.py``) on each ``plus+`` store.

    python -m compat_suite.flask_run                      # every configuration
    python -m compat_suite.flask_run --config plus-sqlite

Each run is one :class:`FlaskDeployment` (its own prefix for the queue, Redis keys and
PostgreSQL schema; removed afterwards). The project reads its settings Flask's way
(``app.config.from_prefixed_env()``), so the deployment sets ``FLASK_CELERY__…`` variables and
the project's files stay as written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .configs import Config, Servers
from .deployment import RESULT_DB
from .project_run import ProjectDeployment, ProjectRun, main, run_project

FLASK_PROJECT = Path(__file__).resolve().parent / "flask_project"
#: One run of the Flask project's tests (kept under its first name).
FlaskRun = ProjectRun


class FlaskDeployment(ProjectDeployment):
    """The Flask project deployed per ``config``: one worker of ``make_celery``."""

    project = FLASK_PROJECT
    app_module = "make_celery"

    @property
    def env(self) -> dict[str, str]:
        keyprefix = json.dumps({"global_keyprefix": f"{self.prefix}:"})
        celery = {
            "broker_url": self.config.broker_url(self.servers, self.workdir),
            "result_backend": self.servers.redis_db(RESULT_DB),
            "broker_transport_options": keyprefix,
            "result_backend_transport_options": keyprefix,
            "task_default_queue": self.prefix,
            "broker_connection_retry_on_startup": "true",
            # celery-plus's settings; plain Celery ignores them.
            "plus_key_prefix": self.prefix,
            "plus_pg_schema": self.prefix,
        }
        return {**super().env, **{f"FLASK_CELERY__{k}": v for k, v in celery.items()}}

    def start(self, beat: bool = False) -> None:
        """Start one worker (threads pool, 2 threads) on the project's queue; wait until
        ready."""
        self.start_worker("threads", 2, [self.prefix])


def run_flask_project(config: Config, servers: Servers) -> FlaskRun:
    """Deploy the Flask project per ``config``, run its tests, remove the deployment."""
    return run_project(FlaskDeployment, config, servers)


if __name__ == "__main__":
    sys.exit(main(FlaskDeployment, __doc__.split("\n\n")[0]))
