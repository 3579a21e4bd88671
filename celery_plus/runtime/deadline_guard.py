"""The deadline guard: a small process that ends its worker when a run outlives its lease.

The worker's own lease watch (``leases/deadline.py``) stops runs before their leases lapse, but
it is a thread: a task that holds the GIL (a long regular expression, a C extension that never
releases it) starves it, and the lease keeper with it. The lease then lapses while the run goes
on, and another worker runs the job too. So a worker whose pool runs tasks in its own process
(solo, threads, gevent, eventlet) starts this guard beside it: a separate process, with its own
GIL, that reads one number the worker keeps up to date in shared memory — until when every run
going on in the worker is certainly leased (:class:`GuardSlot`) — and kills the worker
(``SIGKILL``: a starved process runs no signal handler) once that time has passed by
``SLACK_S``, saying so on the worker's standard error; the processes its tasks started die
with it (``process_tree``; the guard itself, a child of the worker, is left out and ends
after). The worker's supervisor restarts it; the killed runs' jobs come back when their leases
lapse, a delivery counted each.

The number only ever moves later when the worker's watch thread runs (it renews nothing itself):
a starved worker leaves it where it was, which is the safe side.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

if __package__:
    from celery_plus.runtime import process_tree
else:  # the guard process: this file runs as a script, and loads its sibling alone (the
    # package's import loads Celery: seconds and tens of MB for a process that reads a number)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import process_tree  # type: ignore[no-redef]

#: The guard kills this long after the deadline, leaving the worker's own watch (a clean
#: exit with a log line) the first turn.
SLACK_S = 0.3
#: How often the guard reads the deadline.
POLL_S = 0.05
_FORMAT = "d"
_SIZE = struct.calcsize(_FORMAT)
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def clock() -> float:
    """The host-wide clock of the leases (``leases.keeper.clock``)."""
    return time.clock_gettime(_CLOCK)


def _new_file() -> int:
    """A new slot's file, unlinked, holding ``inf``: its descriptor, 3 or above (the guard's
    standard streams, set as it starts, would take 0-2 over)."""
    made, path = tempfile.mkstemp(prefix="celery-plus-guard-",
                                  dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        os.unlink(path)
        fd = fcntl.fcntl(made, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(made)
    try:
        os.write(fd, struct.pack(_FORMAT, float("inf")))
    except BaseException:
        os.close(fd)
        raise
    return fd


class GuardSlot:
    """The deadline shared with a guard process: a file in memory, mapped by both.

    The file is unlinked as soon as it is made, and the guard gets it as an inherited file
    descriptor: nothing is left in ``/dev/shm`` however the worker ends (its guard is killed
    with it by ``kill -9`` of the process group: a named file was left behind each time)."""

    def __init__(self, fd: int | None = None) -> None:
        made = fd is None
        if fd is None:
            fd = _new_file()
        #: The file's descriptor, open for the guard process to inherit (:func:`start`).
        self.fd = fd
        try:
            self._map = mmap.mmap(fd, _SIZE)
        except BaseException:
            if made:
                os.close(fd)
            raise

    def get(self) -> float:
        value: float = struct.unpack_from(_FORMAT, self._map)[0]
        return value

    def set(self, deadline: float) -> None:
        """Until when every run going on is certainly leased (``inf``: none runs)."""
        struct.pack_into(_FORMAT, self._map, 0, deadline)

    def lower(self, deadline: float) -> None:
        """A run starts: the deadline is the earlier of the two."""
        if deadline < self.get():
            self.set(deadline)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


#: The guards this process started (their pids): its own exit leaves them be
#: (:func:`guard_pids`).
_started: set[int] = set()


def start(slot: GuardSlot) -> subprocess.Popen[bytes]:
    """Start the guard of this process (it ends by itself once this process is gone). It runs
    this file as a script: it needs nothing of celery-plus or Celery."""
    guard = subprocess.Popen([sys.executable, __file__, str(os.getpid()), str(slot.fd)],
                             stdin=subprocess.DEVNULL, close_fds=True, pass_fds=(slot.fd,))
    _started.add(guard.pid)
    return guard


def guard_pids() -> set[int]:
    """The guards this process started. A worker killing the processes below it as it exits
    spares them: a guard may be freezing the worker at that moment to kill it, and a worker
    that froze its guard in turn would leave both stopped for good (seen: every job the
    worker's SQLite lock held waited 120 s). A guard ends by itself once its worker is gone."""
    return set(_started)


def _alive(pid: int) -> bool:
    """Whether the worker that started the guard still runs (a gone parent leaves the guard
    to another: a pid reused since cannot fool it)."""
    return os.getppid() == pid


def guard(pid: int, slot: GuardSlot) -> None:
    """Watch ``pid`` until it is gone; kill it once its deadline has passed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C of the worker's terminal: its to take
    while _alive(pid):
        deadline = slot.get()
        now = clock()
        if now >= deadline + SLACK_S:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            print(f"[{stamp}: CRITICAL/LeaseGuard] celery-plus: worker process {pid} kept "
                  f"running a task {now - deadline:.1f} s past the time its lease was last "
                  "certain (its threads could not run to renew it or stop the task: a task "
                  "holding the GIL?); killing it (SIGKILL) before another worker takes the "
                  "job over. Its supervisor restarts it; the job comes back when its lease "
                  "lapses.", file=sys.stderr, flush=True)
            killed = process_tree.stop_tree(pid)
            if killed:
                print(f"[{stamp}: WARNING/LeaseGuard] celery-plus: killed {len(killed)} "
                      f"process(es) started below worker process {pid} with it: "
                      + " ".join(map(str, killed)), file=sys.stderr, flush=True)
            return
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    pid, fd = int(argv[1]), int(argv[2])
    slot = GuardSlot(fd)
    try:
        guard(pid, slot)
    finally:
        slot.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
