"""Issue #27: a worker whose store links went half-open reconnects within a stated bound.

A real ``celery-plus worker`` reaches its store through a :class:`FaultProxy`. The link
stalls (bytes stop, sockets stay open) long enough for every connection of the worker to be
caught mid-wait, then comes back with those connections stranded for good (half-open: the
kernel of neither side sees a failure). Before the bounds, such a worker ran none of the jobs
published afterwards and logged nothing. Now its calls end after the reply timeout, it says
so in one WARNING line, reconnects, and runs every job published after the link is back
within the bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import wait_until

from .harness import Deployment

#: Short bounds so the scenario stays short (the long variant uses the defaults).
FAST_PG = {"plus_pg_reply_timeout": 2.5, "plus_pg_connect_timeout": 2.0}
FAST_REDIS = {"broker_transport_options": {"socket_timeout": 3.0,
                                           "socket_connect_timeout": 2.0}}
WARNING = {"postgres": "PostgreSQL did not answer", "redis": "Connection to broker lost"}


def stall_then_strand(deployment: Deployment, store: str, stall_s: float,
                      bound: float) -> float:
    """Run jobs, stall the link for ``stall_s``, resume with the old connections stranded,
    publish 6 jobs; the seconds from the resume until all 6 finished (< ``bound``)."""
    proxy: Any = deployment.proxy  # type: ignore[attr-defined]
    worker = deployment.start_worker(concurrency=2)
    before = [deployment.publish("fault.work", f"before-{i}", 0.05) for i in range(2)]
    wait_until(lambda: all(map(deployment.finished, before)), timeout=30,
               message="the jobs of before the stall")
    proxy.stall()
    time.sleep(stall_s)  # the fault itself: how long the link is silent
    proxy.resume(strand=True)
    resumed = time.monotonic()
    after = [deployment.publish("fault.work", f"after-{i}", 0.05) for i in range(6)]
    published = time.monotonic() - resumed
    wait_until(lambda: all(map(deployment.finished, after)), timeout=bound,
               message="the 6 jobs published after the link came back")
    took = time.monotonic() - resumed
    log = worker.log()
    print(f"{store}: stalled {stall_s:.0f} s; the 6 jobs published after it (publishing "
          f"took {published:.1f} s) all finished {took:.1f} s after the link came back")
    assert WARNING[store] in log, log
    if store == "postgres":  # one line says it, however many connections the stall hit
        warnings = [line for line in log.splitlines()
                    if "WARNING/MainProcess" in line and WARNING[store] in line]
        assert len(warnings) == 1, warnings
    assert worker.proc.poll() is None
    return took


@pytest.mark.parametrize(("store", "stall_s"), [("postgres", 1.0), ("postgres", 5.0),
                                               ("redis", 5.0)])
def test_a_worker_on_half_open_links_reconnects_and_runs_new_jobs(
        deploy: Callable[..., Deployment], store: str, stall_s: float) -> None:
    """A stall shorter than the reply timeout (the worker notices only once the link is
    back) and a longer one (it notices during the stall)."""
    conf = FAST_PG if store == "postgres" else FAST_REDIS
    deployment = deploy("half-open link", store, proxied=True, conf=conf)
    stall_then_strand(deployment, store, stall_s=stall_s, bound=30.0)


@pytest.mark.long
@pytest.mark.parametrize("store", ["postgres", "redis"])
def test_a_worker_on_half_open_links_with_the_default_bounds(
        deploy: Callable[..., Deployment], store: str) -> None:
    """The issue's 15 s stall under a 30 s lease, the default bounds and, on PostgreSQL, a
    reply bound of a quarter of the lease (opt-in): the figure of docs/reliability.md, and
    its stated bound: PostgreSQL one reply bound + the connect bound (5 s) + 5 s; Redis two
    ``socket_timeout`` (5 s) + the connect bound (5 s) + 5 s."""
    conf = {"plus_pg_reply_timeout": 7.5} if store == "postgres" else {}
    deployment = deploy("half-open link (defaults)", store, proxied=True, vt=30.0, conf=conf)
    bound = 7.5 + 5.0 + 5.0 if store == "postgres" else 2 * 5.0 + 5.0 + 5.0
    stall_then_strand(deployment, store, stall_s=15.0, bound=bound)
