"""The project the fault suite's workers run: tasks that record every execution.

Workers load ``tests.deploy.faults.app:app``, configured from the environment the harness sets
(``PLUS_FAULT_BROKER``, ``PLUS_FAULT_PREFIX``, ``PLUS_FAULT_LEDGER``, ``PLUS_FAULT_VT``,
``PLUS_FAULT_RESULTS``); the harness builds its publisher with :func:`make_app` and the
same values. Each task writes its run to the ledger (``ledger.py``) first and last.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import time
from typing import Any

from celery_plus import Celery

from .ledger import Ledger

#: The concurrency limit of ``fault.limited`` per key.
LIMIT = 1
#: ``fault.poison`` is dead-lettered after this many deliveries.
POISON_DELIVERIES = 2


class Progress:
    """A run's own code, watched for a freeze: it waits in short steps and notes (in the
    ledger, once) when it first runs again after a step that lasted far longer than asked,
    its process frozen meanwhile. So the harness counts a frozen run as executing after the
    thaw only if its code really ran again, not if it was stopped as its process thawed."""

    #: The longest step of a wait.
    STEP_S = 0.01
    #: A step this much longer than asked means the process was frozen meanwhile.
    STALL_S = 0.5

    def __init__(self, ledger: Ledger, run_id: int) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.resumed: float | None = None
        #: When the run's code was last seen running (the end of its last step).
        self.last = time.monotonic()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.step(min(self.STEP_S, left))

    def step(self, seconds: float) -> None:
        time.sleep(seconds)
        now = time.monotonic()
        if self.resumed is None and now - self.last > seconds + self.STALL_S:
            self.resumed = time.time()
            self.ledger.resumed(self.run_id, self.resumed)
        self.last = now


def make_app(broker: str, prefix: str, ledger_path: str, vt: float,
             results: str | None = None, conf: dict[str, Any] | None = None) -> Celery:
    app = Celery("faults", broker=broker, backend=results, set_as_current=False)
    app.conf.update(
        plus_key_prefix=prefix,
        plus_pg_schema=prefix,
        plus_visibility_timeout=vt,
        plus_maintenance_interval=0.25,
        plus_poll_interval=0.5,
        task_default_queue="faults",
        task_ignore_result=results is None,
        worker_hijack_root_logger=False,
        worker_lost_wait=5.0,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # The opt-out of the Redis eviction check (test_full_store.py).
        plus_redis_allow_eviction=os.environ.get("PLUS_FAULT_ALLOW_EVICTION") == "1",
    )
    app.conf.update(conf or {})  # a scenario's own settings (PLUS_FAULT_CONF)
    ledger = Ledger(ledger_path)

    def run(job: str, label: str, seconds: float, group: str = "") -> None:
        run_id = ledger.start(job, label, group)
        stopped(Progress(ledger, run_id), Progress.sleep, seconds)

    def stopped(progress: Progress, body: Any, *args: Any) -> None:
        """Run ``body(progress, *args)`` and end the run; a stop (SIGTERM: billiard raises
        SystemExit in the pool process) is noted with its time."""
        try:
            body(progress, *args)
            ledger.end(progress.run_id, resumed=progress.resumed)
        except BaseException:
            ledger.end(progress.run_id, stopped=True, resumed=progress.resumed)
            raise

    @app.task(name="fault.work", bind=True)
    def work(self: Any, label: str, seconds: float) -> str:
        run(self.request.id, label, seconds)
        return label

    @app.task(name="fault.limited", bind=True, concurrency=LIMIT, concurrency_key="key")
    def limited(self: Any, key: str, label: str, seconds: float) -> str:
        run(self.request.id, label, seconds, group=key)
        return label

    @app.task(name="fault.limited_until", bind=True, concurrency=LIMIT, concurrency_key="key")
    def limited_until(self: Any, key: str, label: str, marker: str, most_s: float) -> str:
        """A job of concurrency group ``key`` that runs until the file ``marker`` exists
        (at most ``most_s``): a run that lasts as long as the scenario needs it to."""
        run_id = ledger.start(self.request.id, label, key)

        def wait(progress: Progress) -> None:
            deadline = time.monotonic() + most_s
            while time.monotonic() < deadline and not os.path.exists(marker):
                progress.step(0.05)

        stopped(Progress(ledger, run_id), wait)
        return label

    @app.task(name="fault.hold_gil", bind=True)
    def hold_gil(self: Any, label: str, count: int) -> str:
        run_id = ledger.start(self.request.id, label)
        sum(range(count))  # one call in C: the GIL stays held until it returns
        ledger.end(run_id)
        return label

    @app.task(name="fault.limited_hold_gil", bind=True, concurrency=LIMIT,
              concurrency_key="key")
    def limited_hold_gil(self: Any, key: str, label: str, count: int) -> str:
        """``fault.hold_gil`` in a concurrency group (a task with extension options: claimed
        in the coordination store on a broker that is not ``plus+``)."""
        run_id = ledger.start(self.request.id, label, key)
        sum(range(count))
        ledger.end(run_id)
        return label

    @app.task(name="fault.with_child", bind=True)
    def with_child(self: Any, label: str, seconds: float, later_s: float) -> str:
        """Does its work in a process of its own (``sleep``: ``seconds`` in the job's first
        run, ``later_s`` in later ones), noted in the ledger: a stopped run's child must
        stop with it."""
        job = self.request.id
        run_id = ledger.start(job, label)
        child = subprocess.Popen(["sleep", str(seconds if ledger.first(job) == run_id
                                               else later_s)])
        ledger.child(job, run_id, child.pid)

        def wait(progress: Progress) -> None:
            while child.poll() is None:
                progress.step(0.02)

        stopped(Progress(ledger, run_id), wait)
        return label

    @app.task(name="fault.unique", bind=True, unique=True)
    def unique(self: Any, label: str, seconds: float) -> str:
        run(self.request.id, label, seconds)
        return label

    @app.task(name="fault.unique_until", bind=True, unique=True)
    def unique_until(self: Any, label: str, marker: str, most_s: float) -> str:
        """``fault.unique`` that runs until the file ``marker`` exists (at most ``most_s``)."""
        run_until(self.request.id, label, marker, most_s)
        return label

    def run_then_retry(task: Any, label: str, seconds: float, yield_to_later: bool,
                       group: str = "") -> str:
        """Runs, then asks for a retry at the end of its first delivery (a continuation
        of the same id). ``yield_to_later``: the job's first run lasts until a later run of
        the job has started (at most a minute), so the stale run of a thawed worker
        publishes its retry while the live claim runs; later runs last ``seconds``."""
        job = task.request.id
        run_id = ledger.start(job, label, group)

        def wait(progress: Progress) -> None:
            if not (yield_to_later and ledger.first(job) == run_id):
                progress.sleep(seconds)
                return
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ledger.overtaken(job, run_id):
                progress.step(0.05)

        stopped(Progress(ledger, run_id), wait)
        if not task.request.retries:
            raise task.retry(countdown=0)
        return label

    @app.task(name="fault.retry_once", bind=True, max_retries=1)
    def retry_once(self: Any, label: str, seconds: float, yield_to_later: bool = False) -> str:
        return run_then_retry(self, label, seconds, yield_to_later)

    def run_until(job: str, label: str, marker: str, most_s: float) -> None:
        """A run that lasts until the file ``marker`` exists (at most ``most_s``)."""
        run_id = ledger.start(job, label)

        def wait(progress: Progress) -> None:
            deadline = time.monotonic() + most_s
            while time.monotonic() < deadline and not os.path.exists(marker):
                progress.step(0.02)

        stopped(Progress(ledger, run_id), wait)

    @app.task(name="fault.retry_when", bind=True, max_retries=1)
    def retry_when(self: Any, label: str, marker: str, most_s: float) -> str:
        """Asks for a retry (``countdown`` 0.2 s) once the file ``marker`` exists: a retry
        published when the scenario says, e.g. into a store outage; the retry returns."""
        run_until(self.request.id, label, marker, 0.0 if self.request.retries else most_s)
        if not self.request.retries:
            raise self.retry(countdown=0.2)
        return label

    @app.task(name="fault.fail_when", bind=True)
    def fail_when(self: Any, label: str, marker: str, most_s: float) -> None:
        """Fails once the file ``marker`` exists: a failure when the scenario says."""
        run_until(self.request.id, label, marker, most_s)
        raise ValueError(f"{label} fails as asked")

    @app.task(name="fault.limited_retry_once", bind=True, max_retries=1, concurrency=LIMIT,
              concurrency_key="key")
    def limited_retry_once(self: Any, key: str, label: str, seconds: float,
                           yield_to_later: bool = False) -> str:
        return run_then_retry(self, label, seconds, yield_to_later, group=key)

    @app.task(name="fault.poison", bind=True, max_deliveries=POISON_DELIVERIES)
    def poison(self: Any, label: str, kind: str) -> None:
        """Fails in an unkind way: odd exception text, a dying or crashing process."""
        run_id = ledger.start(self.request.id, label)
        if kind == "surrogate":
            name = os.fsdecode(b"bad-\xff-name")  # a lone surrogate, as os.listdir gives
            raise ValueError(f"cannot open {name}")
        if kind == "nul":
            raise ValueError("a NUL \x00 in the middle")
        if kind == "huge":
            raise ValueError("x" * 1_000_000)
        if kind == "exit":
            os._exit(3)
        if kind == "segfault":
            ctypes.string_at(0)
        ledger.end(run_id)

    return app


def _from_env() -> Celery:
    env = os.environ
    return make_app(env.get("PLUS_FAULT_BROKER", "plus+redis://127.0.0.1:6379/0"),
                    env.get("PLUS_FAULT_PREFIX", "faults"),
                    env.get("PLUS_FAULT_LEDGER", "/tmp/plus-faults-ledger.db"),
                    float(env.get("PLUS_FAULT_VT", "6")),
                    env.get("PLUS_FAULT_RESULTS") or None,
                    json.loads(env.get("PLUS_FAULT_CONF") or "{}"))


app = _from_env()
