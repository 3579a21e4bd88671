"""Run a fault scenario: real workers on a store, a publisher, the fault, then the count.

A :class:`Deployment` is one scenario on one store: it starts ``celery-plus worker``
processes of ``tests.deploy.faults.app``, publishes jobs (and keeps publishing from a thread while
the fault lasts, noting what each publish raised), notes the faults it injects (which pids
died or froze, and when), waits for every acknowledged job to finish, and builds the
:class:`Report`: published, completed, lost, run twice (each with its reason), the most runs
of a concurrency group at any instant, holds and slots left behind, and the recovery time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for
from tests.support import wait_until

from .app import LIMIT, make_app
from .ledger import Ledger, Run

ROOT = Path(__file__).resolve().parents[3]
#: Where every scenario appends its report (one JSON object a line); printed at the end.
REPORT_FILE = Path(os.environ.get("PLUS_FAULT_REPORT", ROOT / ".faults-report.jsonl"))

#: Reasons a job may run more than once (anything else fails the scenario).
DIED = "worker died mid-job"
DIED_BEFORE_ACK = "worker died before its ack was stored"
#: ``plus_maintenance_interval`` of the fault app (``app.py``).
MAINTENANCE_S = 0.25
#: How long after a run ends its ack may still be on its way to the store.
ACK_LATENCY_S = 1.0
FROZE = "worker froze past its lease mid-job"
RETRIED = "retry (a continuation: expected)"
UNEXPLAINED = "UNEXPLAINED"


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """Pids of the worker's pool processes."""
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]

    def signal(self, sig: int, group: bool = True) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.proc.pid, sig)
            else:
                os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM, group=False)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.signal(signal.SIGKILL)  # pool processes left behind, if any


@dataclass
class Report:
    scenario: str
    store: str
    published: int = 0
    completed: int = 0
    dead_lettered: int = 0
    lost: list[str] = field(default_factory=list)
    run_twice: dict[str, str] = field(default_factory=dict)
    max_concurrent: dict[str, int] = field(default_factory=dict)
    #: Seconds a group had more runs than its limit (runs of frozen processes count only
    #: while they were not frozen, and after a thaw only if their code ran again).
    over_limit_s: dict[str, float] = field(default_factory=dict)
    leaked_holds: dict[str, str] = field(default_factory=dict)
    leaked_slots: dict[str, list[str]] = field(default_factory=dict)
    left_running: list[str] = field(default_factory=list)
    #: Runs stopped by their worker although they were never frozen: a live claim's run
    #: stopped because something (a stale continuation) ended its claim.
    stopped_live: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    publish_errors: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        twice = Counter(self.run_twice.values())
        return (f"{self.scenario:<22} {self.store:<10} published {self.published:>4}  "
                f"completed {self.completed:>4}  dead {self.dead_lettered:>2}  lost "
                f"{len(self.lost)}  twice {sum(twice.values())}"
                f"{' ' + json.dumps(dict(twice)) if twice else ''}  max concurrent "
                f"{max(self.max_concurrent.values(), default=0)}/{LIMIT}"
                + (f" (over for {max(self.over_limit_s.values()):.2f}s)"
                   if any(self.over_limit_s.values()) else "")
                + "  leaked "
                f"{len(self.leaked_holds)} holds {len(self.leaked_slots)} slots  recovery "
                + (f"{self.recovery_s:.1f}s" if self.recovery_s is not None else "-")
                + (f"  publish errors {self.publish_errors}" if self.publish_errors else "")
                + (f"  LIVE RUNS STOPPED {len(self.stopped_live)}" if self.stopped_live
                   else ""))

    def write(self) -> None:
        with open(REPORT_FILE, "a") as out:
            out.write(json.dumps(asdict(self)) + "\n")


class Publisher(threading.Thread):
    """Publishes one job every ``every`` seconds until stopped; remembers the acknowledged
    ones and the type of every error raised."""

    def __init__(self, deployment: Deployment, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.deployment = deployment
        self.every = every
        self.errors: Counter[str] = Counter()
        self.tracebacks: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._stop_event.wait(self.every):
            n += 1
            try:
                self.deployment.publish("fault.work", f"p{n}", 0.05)
            except Exception as exc:
                name = f"{type(exc).__module__}.{type(exc).__name__}"
                if not self.errors[name]:
                    self.tracebacks.append(traceback.format_exc())
                self.errors[name] += 1
                self.deployment.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=120)


class Deployment:
    """One scenario on one store (see the module docstring)."""

    def __init__(self, scenario: str, store: str, broker: str, prefix: str, folder: Path,
                 view: Callable[[], Backend], vt: float, results: str | None = None,
                 conf: dict[str, Any] | None = None) -> None:
        self.scenario = scenario
        self.store = store
        self.broker = broker
        self.prefix = prefix
        self.folder = folder
        self.vt = vt
        self.results = results
        self.ledger_path = folder / "ledger.db"
        self.ledger = Ledger(self.ledger_path)
        self.ledger_anchor = self.ledger.anchor()
        #: Settings of the scenario's app and workers (``PLUS_FAULT_CONF``).
        self.conf = dict(conf or {})
        self.app = make_app(broker, prefix, str(self.ledger_path), vt, results, self.conf)
        self.view = view()
        self.inspect = inspector_for(self.view)
        self.workers: list[Worker] = []
        #: label -> task id of every acknowledged publish; label -> expected runs.
        self.jobs: dict[str, str] = {}
        self.expected_runs: dict[str, int] = {}
        self.expected_dead: set[str] = set()
        self.errors: list[str] = []
        #: pid -> when it was killed; pid -> (frozen from, until).
        self.deaths: dict[int, float] = {}
        self.freezes: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.fault_ended: float | None = None
        #: job id -> when a fault hit it (its worker died or froze while it held it).
        self.faulted_jobs: dict[str, float] = {}
        self._lock = threading.Lock()
        self.notes: list[str] = []
        #: A command the workers are started through (e.g. ``setpriv …``), if any.
        self.wrap: list[str] = []

    # -- workers ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {**os.environ, "PLUS_FAULT_BROKER": self.broker, "PLUS_FAULT_PREFIX": self.prefix,
               "PLUS_FAULT_LEDGER": str(self.ledger_path), "PLUS_FAULT_VT": str(self.vt)}
        if self.results:
            env["PLUS_FAULT_RESULTS"] = self.results
        if self.conf:
            env["PLUS_FAULT_CONF"] = json.dumps(self.conf)
        return env

    def start_worker(self, pool: str = "prefork", concurrency: int = 2,
                     wait: bool = True, broker: str | None = None,
                     conf: dict[str, Any] | None = None,
                     release: Path | None = None) -> Worker:
        """``broker``: another URL of the same store (e.g. past the deployment's proxy);
        ``conf``: settings of this worker's own over the deployment's (e.g. a
        ``plus_coordination_url`` past a proxy); ``release``: a folder of another release's
        source to run (``previous_release.py``)."""
        log = self.folder / f"worker-{len(self.workers)}.log"
        program = ([sys.executable, "-m", "celery_plus.cli"] if release is None else
                   [sys.executable, str(Path(__file__).with_name("previous_release.py")),
                    str(release)])
        cmd = [*self.wrap, *program, "-A", "tests.deploy.faults.app", "worker",
               f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=INFO",
               "--without-gossip", "--without-mingle", "--without-heartbeat",
               f"--hostname=f{len(self.workers)}-{self.prefix}@%h"]
        env = self.env() if broker is None else {**self.env(), "PLUS_FAULT_BROKER": broker}
        if conf:
            env["PLUS_FAULT_CONF"] = json.dumps({**self.conf, **conf})
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=release or ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(proc, log)
        self.workers.append(worker)
        if wait:
            self.wait_ready(worker, plus_broker=self.broker.startswith("plus+"))
        return worker

    @staticmethod
    def wait_ready(worker: Worker, plus_broker: bool = True) -> None:
        """Wait until the worker consumes (its signal handlers are installed by then)."""
        wait_until(lambda: " ready." in worker.log() or worker.proc.poll() is not None,
                   timeout=60, message="worker ready")
        assert worker.proc.poll() is None, worker.log()
        # Every scenario runs on Celery's event loop (the transport is asynchronous), but on
        # a green pool, whose consumer Celery runs without one.
        # (Another broker with a coordination store: Celery's own consumer.)
        if plus_broker and not any(f"--pool={green}" in worker.proc.args
                                   for green in ("gevent", "eventlet")):
            assert "consuming on Celery's event loop" in worker.log(), worker.log()

    @contextlib.contextmanager
    def deaths_watched(self, every: float = 0.02) -> Iterator[None]:
        """Note when each process running a job dies (a run its worker stopped by killing
        it has no end in the ledger: its process's death is its end)."""
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(every):
                for run in self.runs():
                    if run.ended is None and run.pid not in self.deaths \
                            and not _alive(run.pid):
                        self.deaths[run.pid] = time.time()

        thread = threading.Thread(target=watch, name="deaths watched", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def overlapping_runs(self) -> list[str]:
        """Runs of one job that went on at the same time (by the ledger; a run without an
        end ended when its process died: :meth:`deaths_watched`)."""
        by_job: dict[str, list[Run]] = defaultdict(list)
        for run in self.runs():
            by_job[run.label].append(run)
        found = []
        for label, runs in by_job.items():
            runs.sort(key=lambda r: r.started)
            for first, second in itertools.pairwise(runs):
                end = self._end_of(first)
                if end > second.started:
                    found.append(f"{label}: pid {first.pid} until "
                                 f"{end - first.started:+.2f} s, pid {second.pid} from "
                                 f"{second.started - first.started:+.2f} s")
        return found

    def note_in_flight(self, pids: set[int]) -> None:
        """The jobs these processes run are hit by the fault about to happen."""
        now = time.time()
        for run in self.runs():
            if run.pid in pids and run.ended is None:
                self.faulted_jobs.setdefault(run.job, now)

    def kill(self, worker: Worker) -> None:
        """kill -9 of a worker and its pool processes; their runs in flight died."""
        pids = {worker.proc.pid, *worker.children()}
        self.note_in_flight(pids)
        now = time.time()
        for pid in pids:
            self.deaths[pid] = now
        worker.signal(signal.SIGKILL)
        worker.proc.wait(timeout=10)

    def busy_children(self, worker: Worker) -> list[int]:
        """The worker's pool processes that are running a task."""
        busy = {r.pid for r in self.runs() if r.ended is None}
        return [pid for pid in worker.children() if pid in busy]

    def kill_child(self, worker: Worker) -> int | None:
        """kill -9 of a pool process that is running a task (None: none is)."""
        children = self.busy_children(worker)
        if not children:
            return None
        pid = children[0]
        self.note_in_flight({pid})
        self.deaths[pid] = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return pid

    def kill_idle_children(self, worker: Worker) -> list[int]:
        """kill -9 of every pool process of ``worker`` that runs no task."""
        busy = {r.pid for r in self.runs() if r.ended is None}
        victims = [pid for pid in worker.children() if pid not in busy]
        for pid in victims:
            self.deaths[pid] = time.time()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return victims

    @contextlib.contextmanager
    def frozen(self, worker: Worker, main_only: bool = False) -> Iterator[None]:
        """SIGSTOP of a worker and its pool processes (``main_only``: of its own process
        alone) for the block, then SIGCONT."""
        pids = [worker.proc.pid] if main_only else [worker.proc.pid, *worker.children()]
        start = time.time()
        worker.signal(signal.SIGSTOP, group=not main_only)
        try:
            yield
        finally:
            worker.signal(signal.SIGCONT, group=not main_only)
            end = time.time()
            for pid in pids:
                self.freezes[pid].append((start, end))

    def stop_workers(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.signal(signal.SIGTERM, group=False)
        for worker in self.workers:
            worker.stop()

    # -- jobs ---------------------------------------------------------------------------
    def publish(self, task: str, label: str, *args: Any, runs: int = 1,
                dead: bool = False, countdown: float | None = None) -> str:
        """Publish ``task(label, *args)``; ``runs``: how many runs it needs; ``dead``: it
        must end as a dead letter; ``countdown``: Celery's."""
        result = self.app.send_task(task, (label, *args) if task != "fault.limited" else args,
                                    ignore_result=self.results is None, countdown=countdown)
        with self._lock:
            self.jobs[label] = result.id
            self.expected_runs[label] = runs
            if dead:
                self.expected_dead.add(label)
        return str(result.id)

    def note_published(self, label: str, job_id: str, runs: int = 1,
                       dead: bool = False) -> None:
        """A job another process published (acknowledged), to be run ``runs`` times
        (``dead``: to end as a dead letter)."""
        with self._lock:
            self.jobs[label] = job_id
            self.expected_runs[label] = runs
            if dead:
                self.expected_dead.add(label)

    def publish_limited(self, key: str, label: str, seconds: float, *args: Any,
                        task: str = "fault.limited", runs: int = 1) -> str:
        """A job of concurrency group ``key`` (limit ``LIMIT``)."""
        result = self.app.send_task(task, (key, label, seconds, *args),
                                    ignore_result=self.results is None)
        with self._lock:
            self.jobs[label] = result.id
            self.expected_runs[label] = runs
        return str(result.id)

    def runs(self) -> list[Run]:
        return self.ledger.runs()

    def wait_running(self, n: int, prefix: str = "", timeout: float = 60) -> None:
        """Wait until ``n`` runs (of jobs whose labels start with ``prefix``) are going on."""
        wait_until(lambda: sum(r.ended is None and r.label.startswith(prefix)
                               for r in self.runs()) >= n,
                   timeout=timeout, interval=0.05, message=f"{n} runs going on")

    def finish(self, note: str, timeout: float = 120) -> Report:
        """Wait for every acknowledged job to finish; the report, written with ``note``."""
        self.wait_all_finished(timeout=timeout)
        report = self.report()
        report.notes.append(note)
        report.write()
        return report

    def started(self, labels: set[str] | None = None) -> list[Run]:
        return [r for r in self.runs() if labels is None or r.label in labels]

    def finished(self, job_id: str) -> bool:
        state = (self.inspect.job(job_id) or {}).get("st")
        return state in ("completed", "failed")

    def wait_all_finished(self, timeout: float) -> None:
        with self._lock:
            ids = dict(self.jobs)

        def done() -> bool:
            return all(self.finished(i) for i in ids.values())

        try:
            wait_until(done, timeout=timeout, interval=0.25, message="every job finished")
        except AssertionError as exc:
            waiting = {label: f"{r.get('st')} by {r.get('wk')} tok {r.get('tok')}"
                       for label, i in ids.items() if not self.finished(i)
                       for r in [self.inspect.job(i) or {}]}
            alive = {w.proc.pid: w.proc.poll() is None for w in self.workers}
            raise AssertionError(f"{exc}: {len(waiting)} unfinished, e.g. "
                                 f"{dict(list(waiting.items())[:10])}; workers alive: {alive}"
                                 f"\n{self.logs()}") from None

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {w.log_path.name} ---\n{w.log()[-tail:]}" for w in self.workers)

    # -- the count ----------------------------------------------------------------------
    def report(self) -> Report:
        report = Report(self.scenario, self.store, published=len(self.jobs))
        runs = self.runs()
        by_job: dict[str, list[Run]] = defaultdict(list)
        for run in runs:
            by_job[run.job].append(run)
        for label, job_id in self.jobs.items():
            record = self.inspect.job(job_id) or {}
            state = record.get("st")
            if state == "completed":
                report.completed += 1
            elif state == "failed":
                report.dead_lettered += 1
            job_runs = by_job.get(job_id, [])
            if label in self.expected_dead:
                if state != "failed":
                    report.lost.append(f"{label}: expected a dead letter, found {state}")
            elif state != "completed" or not any(r.ended is not None and not r.stopped
                                                 for r in job_runs):
                report.lost.append(f"{label}: {state}, {len(job_runs)} run(s)")
            extra = len(job_runs) - self.expected_runs.get(label, 1)
            if extra > 0 and label not in self.expected_dead:
                report.run_twice[label] = self._why_again(job_runs, extra)
                if report.run_twice[label] == UNEXPLAINED:
                    report.notes.append(f"{label} {job_id}: runs {self._describe(job_runs)}; "
                                        f"history {record.get('hist')}")
            elif label in self.expected_runs and self.expected_runs[label] > 1 and job_runs:
                report.run_twice[label] = RETRIED
        report.max_concurrent, report.over_limit_s = self._concurrency(runs)
        for group, peak in report.max_concurrent.items():
            if peak > LIMIT:
                members = [r for r in runs if r.group == group]
                histories = "; ".join(f"{r.label}: {(self.inspect.job(r.job) or {}).get('hist')}"
                                      for r in members)
                report.notes.append(f"group {group}: {self._describe(members)}; deaths "
                                    f"{self._relative(self.deaths, members)}; {histories}")
        report.leaked_holds = self.inspect.holds()
        for group in {r.group for r in runs if r.group}:
            for task in ("fault.limited", "fault.limited_retry_once"):
                scope = f'{task}:"{group}"'
                holders = self.inspect.slot_holders(scope)
                if holders:
                    report.leaked_slots[scope] = sorted(holders)
        report.left_running = self.inspect.ids_in_state("running")
        report.stopped_live = [f"{r.label} (pid {r.pid})" for r in runs
                               if r.stopped and not self.freezes.get(r.pid)]
        report.recovery_s = self._recovery(runs)
        report.notes += self.notes
        report.publish_errors = dict(Counter(e.partition(":")[0] for e in self.errors))
        return report

    def _why_again(self, job_runs: list[Run], extra: int) -> str:
        """Why a job ran ``extra`` times more than expected: each earlier run must have
        died or been frozen past its lease."""
        reasons = []
        for run in job_runs[:-1][:extra] if extra else []:
            died = self.deaths.get(run.pid)
            frozen = any(start < (run.ended or float("inf")) and run.started < end
                         for start, end in self.freezes.get(run.pid, []))
            if frozen:
                reasons.append(FROZE)
            elif run.ended is None and died is not None:
                reasons.append(DIED)
            elif died is not None and 0 <= died - (run.ended or 0) <= ACK_LATENCY_S:
                reasons.append(DIED_BEFORE_ACK)
            else:
                reasons.append(UNEXPLAINED)
        return UNEXPLAINED if UNEXPLAINED in reasons else ", ".join(sorted(set(reasons)))

    def _relative(self, times: dict[int, float], runs: list[Run]) -> dict[int, float]:
        t0 = min((r.started for r in runs), default=0.0)
        return {pid: round(t - t0, 2) for pid, t in times.items()}

    def _describe(self, runs: list[Run]) -> str:
        t0 = min((r.started for r in runs), default=0.0)
        text = ", ".join(f"{r.label} pid {r.pid} {r.started - t0:+.2f}.."
                         f"{(r.ended or 0) - t0:+.2f}" for r in runs)
        if self.fault_ended:
            text += f" (fault ended {self.fault_ended - t0:+.2f})"
        return text

    def _end_of(self, run: Run) -> float:
        if run.ended is not None:
            return run.ended
        return self.deaths.get(run.pid, float("inf"))

    def _live_intervals(self, run: Run) -> list[tuple[float, float]]:
        """When ``run`` was executing: from start to end, less the times it was frozen, and
        less what followed a freeze if its code never ran again (stopped as it thawed)."""
        spans = [(run.started, self._end_of(run))]
        for start, end in sorted(self.freezes.get(run.pid, [])):
            resumed = run.resumed is not None and run.resumed >= start
            cut: list[tuple[float, float]] = []
            for a, b in spans:
                if end <= a or start >= b:
                    cut.append((a, b))
                    continue
                if a < start:
                    cut.append((a, start))
                if end < b and resumed:
                    cut.append((end, b))
            spans = cut
        return spans

    def _concurrency(self, runs: list[Run]) -> tuple[dict[str, int], dict[str, float]]:
        """Per group: the most runs executing at once, and how long more than LIMIT did."""
        peaks: dict[str, int] = {}
        over: dict[str, float] = {}
        groups: dict[str, list[Run]] = defaultdict(list)
        for run in runs:
            if run.group:
                groups[run.group].append(run)
        for group, members in groups.items():
            edges: list[tuple[float, int]] = []
            for run in members:
                for a, b in self._live_intervals(run):
                    edges += [(a, 1), (b, -1)]
            edges.sort(key=lambda e: (e[0], e[1]))
            level = peak = 0
            since = 0.0
            total = 0.0
            for at, step in edges:
                if level > LIMIT:
                    total += at - since
                level += step
                since = at
                peak = max(peak, level)
            peaks[group] = peak
            over[group] = round(total, 3)
        return peaks, over

    def _recovery(self, runs: list[Run]) -> float | None:
        """Seconds until the store gave the jobs a fault hit back (the longest wait from a
        job's fault to its recovery in the store's history), or, after a store outage, from
        the end of the outage until a job started again."""
        if self.faulted_jobs:
            waits = {job: recovered - hit for job, hit in self.faulted_jobs.items()
                     if (recovered := self._recovered_at(job, hit)) is not None}
            if not waits:
                self.notes.append("no recovery found: " + "; ".join(
                    f"{job}: {(self.inspect.job(job) or {}).get('hist')}"
                    for job in self.faulted_jobs))
                return None
            slowest = max(waits, key=waits.__getitem__)
            self.notes.append(f"slowest recovery: {slowest}, {waits[slowest]:.2f}s after its "
                              f"fault; history {(self.inspect.job(slowest) or {}).get('hist')}")
            return waits[slowest]
        if self.fault_ended is None:
            return None
        after = [r.started for r in runs if r.started > self.fault_ended]
        return min(after) - self.fault_ended if after else None

    def _recovered_at(self, job_id: str, after: float) -> float | None:
        """When the store got ``job_id`` back after ``after`` (None: not): its expired lease
        recovered, or its delivery given back by the worker whose pool process died (Celery
        rejects it at once; a later fault's recovery of the same job must not count)."""
        try:
            history = json.loads((self.inspect.job(job_id) or {}).get("hist") or "[]")
        except ValueError:
            return None
        times = [entry["finished_ms"] / 1000 for entry in history
                 if isinstance(entry, dict)
                 and entry.get("outcome") in ("lease expired", "worker lost")
                 and entry.get("finished_ms", 0) / 1000 >= after]
        return min(times, default=None)


def check(report: Report, *, recovery_within: float | None = None,
          allow_twice: tuple[str, ...] = (DIED, DIED_BEFORE_ACK, FROZE, RETRIED),
          overlap_s: float = 0.0) -> None:
    """The scenario's assertions. ``overlap_s``: how long a group may exceed its limit (a
    frozen worker's stale run, from when it thaws until it is stopped)."""
    """The scenario's assertions (after the report was written)."""
    assert not report.lost, f"lost: {report.lost}"
    unexplained = {k: v for k, v in report.run_twice.items()
                   if any(r not in allow_twice for r in v.split(", "))}
    assert not unexplained, f"run twice without a reason: {unexplained}; {report.notes}"
    over = {g: s for g, s in report.over_limit_s.items() if s > overlap_s}
    assert not over, (f"concurrency limit {LIMIT} exceeded for longer than {overlap_s}s: "
                      f"{over}; {report.notes}")
    assert not report.leaked_holds, f"holds left behind: {report.leaked_holds}"
    assert not report.leaked_slots, f"slots left behind: {report.leaked_slots}"
    assert not report.left_running, f"jobs left running: {report.left_running}"
    assert not report.stopped_live, f"live runs stopped: {report.stopped_live}"
    if recovery_within is not None:
        assert report.recovery_s is not None, "work never went on after the fault"
        assert report.recovery_s <= recovery_within, (report.recovery_s, recovery_within,
                                                      report.notes)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
