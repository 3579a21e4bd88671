"""What the schedule and rate-limit scenarios measure, shared by the CI tests
(``tests/deploy/e2e/test_periodic.py``, ``test_rate_limits.py``) and their long variants
(``tests/deploy/faults/long_periodic.py``).

* Beat processes (``celery-plus beat`` of :mod:`tests.deploy.e2e.periodic_proj`): :class:`Beat`
  runs one; each logs ``celery-plus beat: tick fired (..., due <ISO>)`` when the store fired a
  tick, so :func:`fired` reads every tick enqueued and when.
* :func:`kill_before_tick`: SIGKILL the leader just before a tick is due, optionally right
  after its last renewal of the role (the worst case of the takeover bound).
* :func:`tick_report`: duplicates, missing ticks and the longest gap between enqueues.
* :func:`most_in_window`: the most starts any sliding window holds.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from celery_plus.beat import ROLE
from celery_plus.model.store import Backend

ROOT = Path(__file__).resolve().parents[3]
CELERY_PLUS = [sys.executable, "-m", "celery_plus.cli"]
_FIRED = re.compile(r"^\[(?P<at>[\d-]+ [\d:]+,\d+): INFO/[^\]]*\] celery-plus beat: "
                    r"(?P<entry>\S+) fired \((?P<task>[^,]+), due (?P<due>[^)]+)\)", re.M)
_LEADS = re.compile(r"^\[(?P<at>[\d-]+ [\d:]+,\d+): INFO/[^\]]*\] celery-plus beat \S+ leads",
                    re.M)


def _log_time(text: str) -> float:
    """A log line's time (Celery's local-time format) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


class Beat:
    """One ``celery-plus beat`` process of ``tests.deploy.e2e.periodic_proj``."""

    def __init__(self, log: Path, env: dict[str, str],
                 app: str = "tests.deploy.e2e.periodic_proj", args: Sequence[str] = ()) -> None:
        self.log_path = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [*CELERY_PLUS, "-A", app, "beat", "--loglevel=INFO", *args], cwd=ROOT,
                env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def leading_since(self) -> float | None:
        """When this process last became the leader (None: never), if it is alive."""
        found = leads(self.log())
        return found[-1] if found and self.alive() else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def leads(log: str) -> list[float]:
    """When the process writing ``log`` became the leader, each time (epoch seconds)."""
    return [_log_time(at) for at in _LEADS.findall(log)]


def leader(beats: Sequence[Beat]) -> Beat | None:
    """The live process that became the leader last."""
    leading = [(b.leading_since(), i) for i, b in enumerate(beats)]
    best = max(((t, i) for t, i in leading if t is not None), default=None)
    return None if best is None else beats[best[1]]


@dataclass(frozen=True)
class Kill:
    """A leader SIGKILLed by :func:`kill_before_tick` (times: ms, store clock)."""

    at_ms: int
    due_ms: int
    #: When the victim's role lease was to lapse (its last renewal's lease).
    lapses_ms: int
    #: The victim renewed the role within the last poll before the kill.
    just_renewed: bool


def kill_before_tick(victim: Beat, view: Backend, every_ms: int, *, before_ms: int = 150,
                     after_renewal_ms: int = 0, entry: str = "tick") -> Kill:
    """SIGKILL the leading ``victim`` ``before_ms`` or less before ``entry``'s next tick.

    ``after_renewal_ms`` > 0: at the first renewal of the role seen within that long before
    the tick (the kill follows it within a poll, ~10 ms); the moment ``before_ms`` before
    the tick if none is seen. So the tick is the victim's to fire, and the lease it leaves
    behind is as fresh as it can be: the longest takeover gap (docs/schedules.md).
    """
    while True:
        [record] = [r for r in view.schedules() if r.name == entry]
        due = record.last_due_ms + every_ms
        now = view.now_ms()
        if due - now > before_ms + after_renewal_ms + 50:
            break
        time.sleep(0.02)  # too close to this tick: take the next one
    held = view.role_holder(ROLE)
    renewed = False
    while (now := view.now_ms()) < due - before_ms:
        current = view.role_holder(ROLE)
        # A renewal moves the lapse by about a renewal period; Redis's TIME + PTTL reading
        # of it can move by a millisecond without one.
        renewed = current is not None and held is not None and current[1] > held[1] + 50
        held = current or held
        if renewed and due - now <= before_ms + after_renewal_ms:
            break
        time.sleep(0.01)
    victim.kill()
    return Kill(now, due, held[1] if held else 0, renewed)


@dataclass(frozen=True)
class Fired:
    """A tick the store fired: its due time (ms), when the firing beat logged it (s)."""

    due_ms: int
    at: float
    log: str


def fired(logs: dict[str, str], entry: str = "tick") -> list[Fired]:
    """Every tick of ``entry`` fired according to the beat logs, by due time."""
    out = []
    for name, text in logs.items():
        for m in _FIRED.finditer(text):
            if m["entry"] == entry:
                due = round(datetime.fromisoformat(m["due"]).timestamp() * 1000)
                out.append(Fired(due, _log_time(m["at"]), name))
    return sorted(out, key=lambda f: (f.due_ms, f.at))


@dataclass
class TickReport:
    ticks: int
    duplicates: list[int] = field(default_factory=list)
    #: Due times missing between the first and the last tick (ms).
    missing: list[int] = field(default_factory=list)
    #: Longest time between two consecutive enqueues (s).
    longest_gap_s: float = 0.0
    by_log: dict[str, int] = field(default_factory=dict)

    def ok(self) -> bool:
        return not self.duplicates and not self.missing


def tick_report(ticks: Sequence[Fired], every_ms: int) -> TickReport:
    counts = Counter(t.due_ms for t in ticks)
    dues = sorted(counts)
    missing = [due for a, b in pairwise(dues)
               for due in range(a + every_ms, b, every_ms)]
    times = sorted(t.at for t in ticks)
    gaps = [b - a for a, b in pairwise(times)]
    return TickReport(ticks=len(ticks), duplicates=sorted(d for d, n in counts.items() if n > 1),
                      missing=missing, longest_gap_s=round(max(gaps, default=0.0), 3),
                      by_log=dict(Counter(t.log for t in ticks)))


def most_in_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` (seconds) that any half-open window ``[t, t + window)`` holds."""
    ordered = sorted(times)
    best = start = 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best
