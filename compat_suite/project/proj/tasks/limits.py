"""Tasks under time limits (soft: an exception inside the task; hard: the process is killed)."""

import time

from celery.exceptions import SoftTimeLimitExceeded

from proj.celery import app
from proj.effects import record


@app.task(soft_time_limit=1, time_limit=10)
def crunch(seconds: float) -> str:
    """Cleans up and returns when the soft time limit interrupts it."""
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        record("crunch_interrupted")
        return "partial"
    return "complete"


@app.task(time_limit=1)
def hang(seconds: float) -> str:
    """Killed by the hard time limit."""
    record("hang_start")
    time.sleep(seconds)
    record("hang_end")
    return "woke up"
