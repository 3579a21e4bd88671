"""How long stopping a run's process tree takes (``runtime/process_tree.py``, issue #27).

``python -m benchmarks.tree_stop [runs]``: per run, (a) a "pool process" with a ``subprocess``,
a shell with a background job and a ``setsid`` child below it, and (b) a process that forks
without end (every child forks a grandchild) for 0.5 s; each stopped with ``stop_tree``. Prints
the time, how many processes were killed, how many of the tree still run afterwards (each tree
runs in a session of its own; the ``setsid`` child is looked for by pid), and the load average.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from celery_plus.runtime import process_tree

TREE = textwrap.dedent("""
    import subprocess, time
    kids = [subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sh", "-c", "sleep 61 & wait"]),
            subprocess.Popen(["setsid", "sleep", "62"])]
    time.sleep(0.3)
    print(kids[2].pid, flush=True)
    time.sleep(60)
""")

FORKS_ON = textwrap.dedent("""
    import os, time
    print(0, flush=True)
    while True:
        if os.fork() == 0:
            os.fork()
            time.sleep(60)
            os._exit(0)
""")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in "ZX"
    except OSError:
        return False


def _session(sid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        if name.isdigit() and fields[3] == str(sid) and fields[0] not in "ZX":
            found.append(int(name))
    return found


def measure(script: str, grow_s: float) -> tuple[float, int, int]:
    """(seconds, processes killed, processes of the tree left running)."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    other = int(proc.stdout.readline())
    time.sleep(grow_s)
    started = time.perf_counter()
    killed = process_tree.stop_tree(proc.pid)
    took = time.perf_counter() - started
    proc.wait()
    time.sleep(0.3)
    left = _session(proc.pid) + ([other] if other and _running(other) else [])
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return took, len(killed), len(left)


def main(runs: int) -> None:
    for name, script, grow_s in (("tree of 5", TREE, 0.0), ("forks on", FORKS_ON, 0.5)):
        for _ in range(runs):
            took, killed, left = measure(script, grow_s)
            print(f"{name:<10} stopped in {took * 1000:7.1f} ms, killed {killed:5d}, "
                  f"left running {left}  (load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
