"""What every scenario gets (:class:`Context`), the registry, and polling helpers."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from proj.effects import effects
from proj.settings import PREFIX

Outcome = dict[str, Any]

#: How much earlier than due a run may look: the clocks' rounding, never a real early run.
EARLY = 0.02
#: How much later than due each step of a delayed run (countdown, eta, retry) may be: the
#: ETA it is given after the moment it waits from, and its start after that ETA. Plain Celery
#: on Redis takes a few milliseconds for each, and under a loaded CI tens to hundreds
#: (docs/compat.md, "Timing verdicts"); a run a second late fails.
LATE = 1.0


def on_time(after: float, start: float, eta: str | None, due: float) -> bool:
    """True if a run due ``due`` seconds after ``after`` (a ``time.time()``) was on time: its
    ETA (Celery's ``request.eta``, ISO 8601) is ``due`` seconds after ``after``, and it
    ``start``-ed at that ETA; neither step earlier than :data:`EARLY` allows, nor more than
    :data:`LATE` late. A run without an ETA is not on time."""
    if eta is None:
        return False
    at = datetime.fromisoformat(eta).timestamp()
    return due - EARLY <= at - after <= due + LATE and -EARLY <= start - at <= LATE


@dataclass(frozen=True)
class Context:
    """The deployment a scenario runs against."""

    app: Any
    #: Node name of the deployment's one worker (``name@host``).
    worker: str
    #: The command line of this deployment's CLI (``celery`` or ``celery-plus``).
    cli: tuple[str, ...]
    timeout: float = 30.0
    #: The worker's pool (prefork, threads, gevent, solo).
    pool: str = "prefork"
    #: True when the project runs as a Django project (``djsite``).
    django: bool = False

    def inspect(self, timeout: float = 5.0) -> Any:
        return self.app.control.inspect(destination=[self.worker], timeout=timeout)


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Context], Outcome]
    doc: str
    #: The pools the scenario applies to (None: every pool).
    pools: tuple[str, ...] | None = None
    #: True for scenarios about the Django integration (run only in a Django deployment).
    django: bool = False

    def not_applicable(self, ctx: Context) -> str | None:
        """Why the scenario does not apply to ``ctx``'s deployment (None: it does)."""
        if self.pools is not None and ctx.pool not in self.pools:
            return f"needs the {' or '.join(self.pools)} pool (Celery's own limits)"
        if self.django and not ctx.django:
            return "needs the Django deployment"
        return None


SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Callable[[Context], Outcome] | None = None, *,
             pools: tuple[str, ...] | None = None, django: bool = False) -> Any:
    """Register ``fn`` as the scenario named after it (its docstring says what it shows).

    ``@scenario(pools=("prefork",))``: only where plain Celery supports what it does
    (hard time limits, terminating a running task); ``@scenario(django=True)``: only in the
    Django deployment.
    """

    def register(fn: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        SCENARIOS[fn.__name__] = Scenario(fn.__name__, fn, doc, pools, django)
        return fn

    return register(fn) if fn is not None else register


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0,
             interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; raise after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_for_effects(kind: str, n: int = 1, timeout: float = 30.0,
                     **match: Any) -> list[dict[str, Any]]:
    """Wait until at least ``n`` effects of ``kind`` matching ``match`` were recorded."""
    return wait_for(lambda: (found := effects(kind, **match)) and len(found) >= n and found,
                    f"{n} {kind!r} effect(s) {match}", timeout)


def local(name: Any) -> Any:
    """A queue/routing name without the deployment prefix (``<prefix>.urgent`` -> ``urgent``)."""
    if isinstance(name, str):
        return name.replace(f"{PREFIX}.", "").replace(PREFIX, "<prefix>")
    return name


def error_of(result: Any) -> Outcome:
    """A failed result's exception, as type name and message."""
    exc = result.result
    return {"type": type(exc).__name__, "message": str(exc)}


#: Every signal proj.signals records.
ALL_SIGNALS = ("before_task_publish", "after_task_publish", "task_received", "task_prerun",
               "task_retry", "task_success", "task_failure", "task_postrun", "task_revoked")
#: Signals sent by the process executing a task (their order is Celery's).
EXECUTION_SIGNALS = ("task_prerun", "task_retry", "task_success", "task_failure",
                     "task_postrun")


def signal_trail(task_id: str, only: tuple[str, ...] = ()) -> list[str]:
    """The signals recorded for one task id (optionally only those in ``only``), in order."""
    return [e["signal"] for e in effects("signal", id=task_id)
            if not only or e["signal"] in only]
