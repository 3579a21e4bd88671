"""A rolling upgrade from the previous release, default settings, on every store.

Workers of the previous release (``previous_release.py``: its own source, no second install)
and a publisher of it that keeps publishing share the store with this release's publisher and
workers (all started side by side: a start costs seconds); one old worker is stopped with
``SIGTERM`` midway (a deploy), any other runs to the end. The jobs mix plain,
``concurrency=1``, unique, retrying and scheduled tasks, from both releases, in the same
groups, and two jobs no release can read (a later release's format, no message), which end as
dead letters with their reason. Checked: each release ran the other's jobs; no worker exits
but the one stopped (with 0); by the external ledger nothing is lost, no job runs more often
than it asked (a retry: twice), no two runs of a job overlap and no group is ever over its
limit; this release's workers announce the formats they read, the old ones nothing. The
README suite runs one old and one new worker on Redis; the long run two of each on
every store, and once across a Redis restart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.model import formats
from celery_plus.model.store import NewJob
from tests.support import wait_until

from .harness import RETRIED, Deployment, Report, Worker, check
from .previous_release import IMPORTED, PREVIOUS_RELEASE, RETRIED_PREFIX, unpack
from .test_worker_kills import publish_mix

STORES = ["redis", "postgres", "sqlite"]
#: Jobs no release can run, stored as they are: a later release's format (NUL-led) and no
#: message at all. Each ends as a dead letter with one of :data:`UNREADABLE_REASONS`.
UNREADABLE = {"unreadable-later": b"\x00z9 a later release's layout", "unreadable-empty": b""}
#: The README variant's unreadable jobs carry their own delivery limit: a worker of this
#: release gives a job in a later release's format back after a back-off that grows with its
#: deliveries (1 s, 2 s, ...: with the default limit of 5, 15 s before its dead letter, as
#: the long variants and the channel suite show), so there it ends after one back-off.
README_UNREADABLE_LIMIT = 2
#: This release's reasons (``transport/envelopes.py``), the previous release's for both
#: (``malformed message``), and the delivery limit's (a job given back each time).
UNREADABLE_REASONS = {"unreadable by this release", "message missing", "malformed message",
                      "delivery limit"}
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: the previous release comes from its history")
    return unpack(ROOT, tmp_path_factory.mktemp("previous-release"))


class OldPublisher:
    """A publisher process of the previous release (``previous_release.py publish``)."""

    def __init__(self, deployment: Deployment, release: Path, every: float) -> None:
        self.deployment = deployment
        self.out = deployment.folder / "old-published.tsv"
        self.stop_file = deployment.folder / "old-publisher.stop"
        self.log_path = deployment.folder / "old-publisher.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("previous_release.py")),
                 str(release), "publish", str(self.out), str(self.stop_file), str(every)],
                cwd=release, env=deployment.env(), stdout=log, stderr=subprocess.STDOUT)

    def published(self) -> int:
        return len(self.out.read_text().splitlines()) if self.out.exists() else 0

    def stop(self) -> None:
        self.stop_file.touch()
        code = self.proc.wait(timeout=60)
        log = self.log_path.read_text(errors="replace")
        assert code == 0, log[-3000:]
        assert IMPORTED in log, log
        for line in self.out.read_text().splitlines():
            label, job_id = line.split("\t")
            self.deployment.note_published(label, job_id,
                                           runs=2 if label.startswith(RETRIED_PREFIX) else 1)


@pytest.fixture
def old_publishers() -> Iterator[list[OldPublisher]]:
    made: list[OldPublisher] = []
    yield made
    for publisher in made:
        if publisher.proc.poll() is None:
            publisher.proc.kill()
            publisher.proc.wait(timeout=10)


def run_rolling_upgrade(deployment: Deployment, release: Path,
                        old_publishers: list[OldPublisher], old_workers: int, jobs: int,
                        every: float = 0.05, restart_redis: bool = False,
                        unreadable_limit: int = 0) -> None:
    """``old_workers`` of the previous release (the first stopped midway), two of this one
    (one with ``old_workers=1``); ``jobs``: each of this release's three batches. The
    processes start side by side (a start is seconds; the README suite's variant is short).
    ``every``: the old publisher's pace. ``restart_redis``: the Redis server is killed and
    restarted (AOF) while both releases run, before the old worker is stopped.
    ``unreadable_limit``: the unreadable jobs' own delivery limit (0: none, the workers')."""
    old = [deployment.start_worker(concurrency=2, release=release, wait=False)
           for _ in range(old_workers)]
    publisher = OldPublisher(deployment, release, every=every)
    old_publishers.append(publisher)
    # This release: its publisher (the test process) and its workers, beside the old ones.
    new: list[Worker] = [deployment.start_worker(concurrency=2, wait=False)]
    publish_mix(deployment, jobs, seconds=0.05)
    for worker in (*old, *new):
        deployment.wait_ready(worker)
    for worker in old:
        assert f"{IMPORTED}{release}" in worker.log(), worker.log()[:2000]
    # This release's workers announce the stored formats they read; the previous release
    # keeps no worker record, so no publisher sees its workers (docs/upgrading.md).
    wait_until(lambda: len(deployment.view.worker_beats()) >= len(new), timeout=30,
               message="this release's workers recorded")
    beats = deployment.view.worker_beats()
    assert len(beats) == len(new) and all(b.reads == formats.READS for b in beats), beats
    old_pids = {pid for worker in old for pid in worker.children()}
    new_pids = {pid for worker in new for pid in worker.children()}
    publish_mix(deployment, jobs, seconds=0.05, first=jobs)
    for n in range(2):  # a retry each (run by either release), and scheduled jobs
        deployment.publish("fault.retry_once", f"r{n}", 0.05, runs=2)
        deployment.publish("fault.work", f"c{n}", 0.05, countdown=0.3)
    for label, message in UNREADABLE.items():  # a worker of either release may claim them
        # Stored as they are (push_raw's publish), with the job's own delivery limit.
        raw: Any = message
        deployment.view.publish(NewJob(id=label, queue="faults", message=raw,
                                       max_deliveries=unreadable_limit))
        deployment.note_published(label, label, dead=True)
    wait_until(lambda: any(r.pid in old_pids for r in deployment.runs()
                           if not r.label.startswith("old-")),
               timeout=30, message="a worker of the previous release runs a new job")
    if restart_redis:
        deployment.server.break_for(2.0)  # type: ignore[attr-defined]
        deployment.fault_ended = restarted = time.time()
        wait_until(lambda: any(r.pid in old_pids and r.started > restarted
                               for r in deployment.runs()),
                   timeout=60, message="a worker of the previous release runs a job after "
                                       "the restart")
    # A deploy: the first old worker gets SIGTERM midway; any other runs to the end.
    old[0].signal(signal.SIGTERM, group=False)
    if old_workers > 1:
        new.append(deployment.start_worker(concurrency=2))
        new_pids |= set(new[-1].children())
    publish_mix(deployment, jobs, seconds=0.05, first=2 * jobs)
    wait_until(lambda: any(r.pid in new_pids for r in deployment.runs()
                           if r.label.startswith("old-")),
               timeout=30, message="a worker of this release runs an old publisher's job")
    publisher.stop()
    with deployment.deaths_watched():
        deployment.wait_all_finished(timeout=120)
    reasons = {label: (deployment.inspect.job(label) or {}).get("reason") for label in UNREADABLE}
    report = deployment.report()
    if restart_redis:
        _previous_release_rejections(deployment, report, old_pids)
    report.notes.append(f"{old_workers} worker(s) of {PREVIOUS_RELEASE[:7]} (one stopped "
                        f"midway) and {len(new)} of this release, {publisher.published()} "
                        f"jobs of the old publisher; unreadable jobs' reasons {reasons}")
    report.write()
    assert old[0].proc.wait(timeout=60) == 0, old[0].log()[-3000:]
    for worker in (*old[1:], *new):
        assert worker.proc.poll() is None, worker.log()[-3000:]
        assert "Unrecoverable error" not in worker.log(), worker.log()[-3000:]
    assert deployment.overlapping_runs() == []
    check(report, allow_twice=(RETRIED,))  # a retry's second run, and nothing else
    assert set(reasons.values()) <= UNREADABLE_REASONS, reasons
    if restart_redis:  # the scenario happened: claims after the restart under 16-digit tokens
        records = [deployment.inspect.job(i) or {} for i in deployment.jobs.values()]
        tokens = [int(r.get("tok") or 0) for r in records]
        assert max(tokens) > 10**15, tokens


def _previous_release_rejections(deployment: Deployment, report: Report,
                                 old_pids: set[int]) -> None:
    """A worker of the previous release dead-letters a retry whose publish met the Redis
    restart (Celery's ``Reject(requeue=False)``; this release gives such a job back instead:
    docs/reliability.md, "A retry that cannot be published"). That job is a dead letter with
    the reason ``rejected``, kept for the admin's retry: the previous release's behaviour, not
    a loss of this one's, so the report says so instead of counting it lost. A job this
    release ran, or one not dead-lettered so, stays lost."""
    runs = deployment.runs()
    rejected = []
    for entry in list(report.lost):
        label = entry.split(":", 1)[0]
        pids = {r.pid for r in runs if r.label == label}
        record = deployment.inspect.job(deployment.jobs.get(label, label)) or {}
        if pids and pids <= old_pids and "rejected" in str(record.get("reason")):
            report.lost.remove(entry)
            rejected.append(label)
    if rejected:
        report.notes.append(f"retries the previous release dead-lettered into the restart "
                            f"(reason 'rejected', kept for a retry): {rejected}")


def test_rolling_upgrade_from_the_previous_release(
        deploy: Callable[..., Deployment], previous_release: Path,
        old_publishers: list[OldPublisher]) -> None:
    """The README suite's variant: one old worker, one new, on Redis (default layout)."""
    run_rolling_upgrade(deploy("rolling upgrade", "redis", vt=6.0), previous_release,
                        old_publishers, old_workers=1, jobs=4, every=0.1,
                        unreadable_limit=README_UNREADABLE_LIMIT)


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_rolling_upgrade_from_the_previous_release_long(
        deploy: Callable[..., Deployment], previous_release: Path,
        old_publishers: list[OldPublisher], store: str) -> None:
    run_rolling_upgrade(deploy("rolling upgrade-long", store, vt=6.0), previous_release,
                        old_publishers, old_workers=2, jobs=30)


@pytest.mark.long
def test_rolling_upgrade_across_a_redis_restart(
        deploy: Callable[..., Deployment], previous_release: Path,
        old_publishers: list[OldPublisher]) -> None:
    """Redis restarts (AOF) while both releases run: this release's claim raises the token
    counter to the clock (``check_boot``), so the old workers' scripts meet 16-digit tokens."""
    run_rolling_upgrade(deploy("rolling upgrade+restart", "redis", vt=6.0), previous_release,
                        old_publishers, old_workers=2, jobs=20, restart_redis=True)
