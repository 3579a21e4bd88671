"""RedBeat's ``RedBeatScheduler`` under ``celery-plus beat`` (docs/addons.md):
:mod:`tests.deploy.e2e.periodic_proj`'s app with RedBeat's keys in the tests' plain Redis,
under the test's prefix (a ``plus+redis://`` broker URL is no URL RedBeat can open, so
``redbeat_redis_url`` names the Redis).

``python -m tests.deploy.e2e.redbeat_proj add NAME TASK SECONDS`` adds an interval entry while
the beats run, as RedBeat's users do (``RedBeatSchedulerEntry(...).save()``).
"""

from __future__ import annotations

import sys
from datetime import timedelta

from tests.deploy.e2e.periodic_proj import PREFIX, app
from tests.deploy.e2e.proj import REDIS_URL

app.conf.redbeat_redis_url = REDIS_URL
app.conf.redbeat_key_prefix = f"{PREFIX}:redbeat:"

__all__ = ["app"]


def add(name: str, task: str, seconds: float) -> None:
    from redbeat import RedBeatSchedulerEntry

    RedBeatSchedulerEntry(name, task, timedelta(seconds=seconds), app=app).save()


if __name__ == "__main__" and sys.argv[1] == "add":
    add(sys.argv[2], sys.argv[3], float(sys.argv[4]))
