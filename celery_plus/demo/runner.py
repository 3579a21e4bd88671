"""``celery-plus demo``: two real workers on a fresh embedded store, a realistic workload,
live progress, and a summary of what each extension did.

1. A temporary directory becomes the workers' working directory, so the demo app (which names
   no broker) runs on the embedded default: ``<tmp>/.celery-plus/celery_plus.demo.db``.
2. The workload is enqueued before any worker is up: 9 monthly reports for 3 customers
   (``concurrency=1`` per customer), 3 webhook events delivered 3 times each (coalesced while
   pending), a flaky inventory sync (``autoretry_for`` with backoff), a poison order import
   and 2 ledger exports for the ``exports`` queue.
3. Worker B (``-Q exports``) starts and claims the exports; its host "stalls" (the exports
   hang). Worker A (``-Q celery,exports``, 8 threads) starts and works through the rest;
   each webhook gets one more delivery while it runs (coalesced while running). B is killed
   with SIGKILL; once the leases of its exports expire (3 s) A recovers and completes them.
4. The store, the results and the tasks' event log are read back for the summary.

Every process the demo starts is killed when it ends, on error and on Ctrl-C too, and the
temporary directory is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from celery_plus.app import embedded_url
from celery_plus.demo import tasks

CUSTOMERS = ("acme", "globex", "initech")
MONTHS = ("2026-01", "2026-02", "2026-03")
WEBHOOK_EVENTS = ("evt_1001", "evt_1002", "evt_1003")
PENDING_DELIVERIES = 3  # per event, enqueued before any worker runs
POISON_ORDER = 1042
EXPORT_PARTS = (1, 2)
STALL_SECONDS = 120.0  # worker B's exports never finish: it is killed first

TIME_LIMIT_S = 55.0
STATES = ("enqueued", "blocked", "scheduled", "running", "completed", "failed")


class DemoError(RuntimeError):
    """The demo could not complete; the message says what was missing."""


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def ready(self) -> bool:
        return " ready." in self.output()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (it runs in its own session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not exit in time."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        if self.proc.poll() is None:
            self.kill()


@dataclass
class Tracked:
    """What the demo enqueued and observed."""

    reports: list[str] = field(default_factory=list)
    webhooks: dict[str, str] = field(default_factory=dict)  # event id -> job id
    deliveries: int = 0
    coalesced_pending: int = 0
    coalesced_running: int = 0
    running_sent: set[str] = field(default_factory=set)
    flaky: str = ""
    poison: str = ""
    exports: list[str] = field(default_factory=list)

    def job_ids(self) -> list[str]:
        return [*self.reports, *self.webhooks.values(), self.flaky, self.poison, *self.exports]


class Demo:
    def __init__(self, out: TextIO, interactive: bool | None = None) -> None:
        self.out = out
        self.interactive = out.isatty() if interactive is None else interactive
        self.started = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="celery-plus-demo-"))
        self.events_path = str(self.tmp / "events.db")
        self.workers: dict[str, Worker] = {}
        self.tracked = Tracked()
        self.events: list[dict[str, Any]] = []
        self._last_event = 0
        self._status_shown = False
        self.app: Any = None
        self.store: Any = None
        self.killed_at: float | None = None

    # -- output ---------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        if self._status_shown and self.interactive:
            self.out.write("\r\033[K")
        self._status_shown = False
        self.out.write(f"{self.elapsed():5.1f}s  {text}\n")
        self.out.flush()

    def status(self, text: str) -> None:
        if self.interactive:
            self.out.write(f"\r\033[K{self.elapsed():5.1f}s  {text}")
            self._status_shown = True
        else:
            self.out.write(f"{self.elapsed():5.1f}s  {text}\n")
        self.out.flush()

    # -- processes ------------------------------------------------------------------------
    def start_worker(self, name: str, queues: str, concurrency: int,
                     extra_env: dict[str, str] | None = None) -> Worker:
        env = {k: v for k, v in os.environ.items()
               if k not in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND",
                            "CELERY_BROKER_READ_URL", "CELERY_BROKER_WRITE_URL")}
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env[tasks.EVENTS_ENV] = self.events_path
        env[tasks.WORKER_ENV] = name
        env.update(extra_env or {})
        log = self.tmp / f"worker-{name}.log"
        cmd = [sys.executable, "-m", "celery_plus.cli", "worker", "-A", "celery_plus.demo.app",
               "--pool=threads", f"--concurrency={concurrency}", f"--queues={queues}",
               f"--hostname={name}@%h", "--loglevel=INFO", "--without-gossip",
               "--without-mingle", "--without-heartbeat"]
        with open(log, "wb") as sink:
            proc = subprocess.Popen(cmd, cwd=self.tmp, env=env, stdout=sink,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        worker = Worker(name, proc, log)
        self.workers[name] = worker
        return worker

    def cleanup(self) -> None:
        for worker in self.workers.values():
            worker.stop(timeout=5.0)
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.close()
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.app.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the store ------------------------------------------------------------------------
    def open_store(self) -> None:
        from celery_plus.stores.registry import open_store

        url = embedded_url(tasks.MAIN, self.tmp)
        (self.tmp / ".celery-plus").mkdir()
        self.app = tasks.make_app(url)
        self.store = open_store(url.removeprefix("plus+"), self.app.plus_config())

    def state(self, job_id: str, missing: str = "?") -> str:
        """The job's state in the store (``missing`` when it has no record)."""
        record = self.store.record(job_id)
        return missing if record is None else record.state

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for job_id in self.tracked.job_ids():
            counts[self.state(job_id, "unknown")] += 1
        return counts

    def poll_events(self) -> list[dict[str, Any]]:
        new = tasks.read_events(self.events_path, self._last_event)
        if new:
            self._last_event = new[-1]["id"]
            self.events += new
            self.narrate(new)
        return new

    def narrate(self, new: list[dict[str, Any]]) -> None:
        """A line for each notable moment the tasks reported."""
        for event in new:
            kind, worker = event["kind"], event["worker"]
            if kind == "flaky.attempt":
                attempt = event["attempt"]
                outcome = ("fails (ConnectionError), retry scheduled with backoff"
                           if attempt < 3 else "succeeds")
                self.say(f"inventory sync attempt {attempt} on worker {worker} {outcome}")
            elif kind == "poison.start":
                self.say(f"order {event['order_id']} import raises ValueError "
                         "(a poison message: dead-lettered, not retried forever)")
            elif kind == "export.start" and worker == "A":
                self.say(f"export part {event['part']} recovered from killed worker B "
                         "(lease expired), running on worker A")

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]

    # -- the workload ---------------------------------------------------------------------
    def enqueue(self) -> None:
        t = self.tracked
        send = self.app.tasks
        for month in MONTHS:
            for customer in CUSTOMERS:
                t.reports.append(send["demo.build_report"].delay(customer, month).id)
        for event_id in WEBHOOK_EVENTS:
            for delivery in range(1, PENDING_DELIVERIES + 1):
                self.deliver_webhook(event_id, delivery, running=False)
        t.flaky = send["demo.sync_inventory"].delay("berlin").id
        t.poison = send["demo.import_order"].delay(POISON_ORDER).id
        t.exports = [send["demo.export_ledger"].delay(part).id for part in EXPORT_PARTS]
        self.say(
            f"enqueued {len(t.reports)} reports ({len(CUSTOMERS)} customers), "
            f"{t.deliveries} webhook deliveries ({len(WEBHOOK_EVENTS)} events), 1 flaky sync, "
            f"1 poison order, {len(t.exports)} exports"
        )
        self.say(f"webhooks: {t.deliveries} deliveries stored as {len(t.webhooks)} jobs "
                 f"({t.coalesced_pending} duplicates coalesced while pending)")

    def deliver_webhook(self, event_id: str, delivery: int, running: bool) -> None:
        t = self.tracked
        result = self.app.tasks["demo.handle_webhook"].delay(event_id, delivery)
        t.deliveries += 1
        if not result.deduplicated:
            t.webhooks[event_id] = result.id
        elif running:
            t.coalesced_running += 1
        else:
            t.coalesced_pending += 1

    def redeliver_running_webhooks(self) -> None:
        """Deliver each webhook once more while its job runs (the provider retried)."""
        t = self.tracked
        ended = {e["event_id"] for e in self.kinds("webhook.end")}
        for event in self.kinds("webhook.start"):
            event_id = event["event_id"]
            if event_id in t.running_sent or event_id in ended:
                continue
            t.running_sent.add(event_id)
            before = t.coalesced_running
            self.deliver_webhook(event_id, PENDING_DELIVERIES + 1, running=True)
            verdict = "coalesced" if t.coalesced_running > before else "NOT coalesced"
            self.say(f"webhook {event_id} redelivered while running: {verdict}")

    # -- the run --------------------------------------------------------------------------
    def wait(self, what: str, predicate: Callable[[], Any], deadline: float) -> Any:
        next_status = 0.0
        while True:
            self.poll_events()
            self.redeliver_running_webhooks()
            value = predicate()
            if value:
                return value
            for worker in self.workers.values():
                if not worker.alive() and not (worker.name == "B" and self.killed_at):
                    raise DemoError(f"worker {worker.name} exited:\n{tail(worker.output())}")
            now = self.elapsed()
            if now > deadline:
                raise DemoError(f"timed out after {now:.0f}s waiting for {what}")
            if now >= next_status:
                next_status = now + 1.0
                self.show_progress()
            time.sleep(0.1)

    def show_progress(self) -> None:
        counts = self.states()
        parts = [f"{state} {counts.get(state, 0)}" for state in STATES]
        up = " ".join(f"{n}:{'up' if w.alive() else 'killed'}"
                      for n, w in sorted(self.workers.items()))
        self.status(f"[{up}] " + " · ".join(parts))

    def finished(self) -> bool:
        done = self.states()
        total = len(self.tracked.job_ids())
        return done.get("completed", 0) + done.get("failed", 0) == total

    def run(self) -> dict[str, str]:
        self.say(f"embedded store: {self.tmp}/.celery-plus/{tasks.MAIN}.db")
        tasks.init_events(self.events_path)
        self.open_store()
        worker_b = self.start_worker("B", "exports", 2,
                                     {tasks.EXPORT_SECONDS_ENV: str(STALL_SECONDS)})
        self.say(f"worker B started (pid {worker_b.proc.pid}, queue exports, "
                 "its exports will stall)")
        self.enqueue()
        self.wait("worker B to start both exports",
                  lambda: len({e["part"] for e in self.kinds("export.start")
                               if e["worker"] == "B"}) == len(EXPORT_PARTS), 30)
        self.say("worker B is running both exports")
        worker_a = self.start_worker("A", "celery,exports", 8)
        self.say(f"worker A started (pid {worker_a.proc.pid}, queues celery+exports, 8 threads)")
        self.wait("worker A to start working",
                  lambda: any(e["worker"] == "A" for e in self.events), 40)
        worker_b.kill()
        self.killed_at = time.time()
        self.say("worker B killed with SIGKILL while holding 2 exports "
                 f"(leases expire in {tasks.VISIBILITY_TIMEOUT:.0f}s)")
        self.wait("every job to finish", self.finished, TIME_LIMIT_S)
        self.poll_events()
        self.show_progress()
        if self.interactive:
            self.out.write("\n")
        return self.summarize()

    # -- the summary ----------------------------------------------------------------------
    def summarize(self) -> dict[str, str]:
        t = self.tracked
        lines: dict[str, str] = {}

        runs = self.kinds("webhook.start")
        coalesced = t.coalesced_pending + t.coalesced_running
        lines["uniqueness"] = (
            f"{t.deliveries} deliveries → {len(t.webhooks)} jobs ({coalesced} coalesced: "
            f"{t.coalesced_pending} while pending, {t.coalesced_running} while running); "
            f"{len(runs)} handler runs"
        )

        starts = self.kinds("report.start")
        ends = {(e["customer"], e["month"]): e["t"] for e in self.kinds("report.end")}
        spans = [(e["customer"], e["t"], ends.get((e["customer"], e["month"]), e["t"]))
                 for e in starts]
        per_customer = max((overlap([(a, b) for c, a, b in spans if c == customer])
                            for customer in CUSTOMERS), default=0)
        parallel = max_distinct_running(spans)
        lines["concurrency"] = (
            f"{len(starts)} reports, max {per_customer} running per customer, "
            f"{parallel} customers in parallel"
        )

        attempts = sorted(e["attempt"] for e in self.kinds("flaky.attempt"))
        flaky_state = self.state(t.flaky)
        lines["retries"] = (
            f"flaky job succeeded on attempt {max(attempts, default=0)}"
            if flaky_state == "completed" else f"flaky job ended {flaky_state}"
        ) + f" (attempts {', '.join(map(str, attempts))}; backoff 1s, 2s)"

        dead = [r for r in map(self.store.record, t.job_ids())
                if r is not None and r.state == "failed"]
        details = [f"{r.exc_type or '?'}: {r.exc_message}" for r in dead]
        lines["dead letters"] = f"{len(dead)} ({'; '.join(details)})"

        on_b = {e["part"] for e in self.kinds("export.start") if e["worker"] == "B"}
        done_a = {e["part"] for e in self.kinds("export.end") if e["worker"] == "A"}
        recovered = on_b & done_a
        deliveries = [str(r.deliveries) if r else "?" for r in map(self.store.record, t.exports)]
        lines["recovery"] = (
            f"{len(recovered)} jobs recovered from the killed worker and completed "
            f"(deliveries per job: {', '.join(deliveries)})"
        )
        return lines


def overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an end before a start at the same time)."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals],
                    key=lambda p: (p[0], p[1]))
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def max_distinct_running(spans: list[tuple[str, float, float]]) -> int:
    """Most distinct customers with a report running at one instant."""
    best = 0
    for _, start, _ in spans:
        running = {c for c, a, b in spans if a <= start < b}
        best = max(best, len(running))
    return best


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Let clean-up finish even if Ctrl-C is pressed again."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt so clean-up runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_demo(out: TextIO | None = None) -> int:
    """Run the demo; returns the exit code (0 when every extension did its part)."""
    out = out or sys.stdout
    demo = Demo(out)
    out.write("celery-plus demo: two workers on the embedded SQLite store\n")
    summary: dict[str, str] | None = None
    code = 1
    try:
        with interrupt_on_sigterm():
            summary = demo.run()
        code = 0
    except KeyboardInterrupt:
        out.write("\ninterrupted: stopping the workers and removing the temporary files\n")
        code = 130
    except Exception as exc:
        reason = str(exc) if isinstance(exc, DemoError) else traceback.format_exc()
        out.write(f"\ndemo failed: {reason}\n")
        for worker in demo.workers.values():
            out.write(f"--- worker {worker.name} log (tail) ---\n{tail(worker.output())}\n")
    finally:
        with signals_ignored():
            demo.cleanup()
    if summary is not None:
        out.write("\nsummary\n")
        for name, line in summary.items():
            out.write(f"  {name}: {line}\n")
        out.write(f"  total: {demo.elapsed():.1f}s; workers stopped, temporary files removed\n")
    out.flush()
    return code
