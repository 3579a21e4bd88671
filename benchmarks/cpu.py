"""CPU seconds a worker spends per job, read from ``/proc``: its main process and its pool
processes, apart. Unlike a rate, this barely moves with the machine's load, so it shows where a
pool's ceiling is (on two cores, a prefork parent and its children share them with the store).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@dataclass
class WorkerCPU:
    """CPU used by a worker process and its pool processes between :meth:`start` and the
    last :meth:`sample` (pool processes are sampled while they live: call it often)."""

    pid: int
    parent_start: float = 0.0
    parent_end: float = 0.0
    kids_start: dict[int, float] = field(default_factory=dict)
    kids_end: dict[int, float] = field(default_factory=dict)

    def start(self) -> None:
        self.parent_start = self.parent_end = process_cpu(self.pid)
        self.kids_start = {kid: process_cpu(kid) for kid in children(self.pid)}
        self.kids_end = dict(self.kids_start)

    def sample(self) -> None:
        self.parent_end = process_cpu(self.pid)
        for kid in children(self.pid):
            self.kids_end[kid] = process_cpu(kid)

    def per_job_ms(self, jobs: int) -> tuple[float, float]:
        """Milliseconds of CPU per job: the main process's, the pool processes' together."""
        kids = sum(end - self.kids_start.get(kid, 0.0) for kid, end in self.kids_end.items())
        return (1000 * (self.parent_end - self.parent_start) / jobs, 1000 * kids / jobs)
