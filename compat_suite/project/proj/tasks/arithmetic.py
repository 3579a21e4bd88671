"""Arithmetic tasks, declared on the app (``@app.task``)."""

import os
import time

from celery.utils.log import get_task_logger

from proj.celery import app
from proj.effects import record

logger = get_task_logger(__name__)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True)
def mul(self, x: int, y: int) -> int:
    """Routed to the urgent queue (``task_routes``); records where it was delivered."""
    record("mul", queue=self.request.delivery_info.get("routing_key"), x=x, y=y)
    return x * y


@app.task
def tsum(numbers: list[int]) -> int:
    record("tsum", numbers=sorted(numbers))
    return sum(numbers)


@app.task
def fail(message: str) -> None:
    logger.info("failing on purpose: %s", message)
    raise ValueError(message)


@app.task(bind=True)
def slow(self, seconds: float, tag: str) -> str:
    record("slow_start", tag=tag, id=self.request.id, pid=os.getpid())
    time.sleep(seconds)
    record("slow_end", tag=tag, id=self.request.id)
    return tag


@app.task(bind=True)
def mark(self, tag: str) -> str:
    """Records that it ran, when, and the queue it came from."""
    record("mark", tag=tag, id=self.request.id, t=time.time(), eta=self.request.eta,
           queue=self.request.delivery_info.get("routing_key"))
    return tag
