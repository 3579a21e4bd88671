"""A stopped run's processes stop with it: freeze a process tree, then kill it.

A task may do its real work in processes of its own (``subprocess.run``, a shell pipeline, a
``multiprocessing`` pool). Killing the process that runs the task leaves them running, handed
to init: the job's work goes on beside the run another worker starts once the lease lapses
(issue #27: a ``sleep`` ran on for 7.75 s beside the new owner's run). So every stop for a
lost or past-sure lease stops the run's whole tree (:func:`stop_tree`,
:func:`kill_own_descendants`):

1. the root is frozen (``SIGSTOP``), then every process found below it, and each one's
   children are read only once it is stopped: a stopped process forks no more, so none slips
   away between the read and the kill; the walk repeats until it finds nothing new;
2. every descendant gets ``SIGKILL`` (a stopped process dies of it too), then the root its
   own signal (``SIGKILL``, or ``SIGTERM`` where Celery's terminate is wanted), and a root
   frozen here is continued so that a signal other than ``SIGKILL`` reaches it.

Children are read from ``/proc/<pid>/task/<tid>/children`` where the kernel offers it
(``CONFIG_PROC_CHILDREN``), else from each process's parent in ``/proc/<pid>/stat``. The
process groups stay as they are (supervisord's ``killasgroup``, Ctrl-C and the tests'
``killpg`` rely on the worker's group).

What escapes: a process that left the tree before the walk (a daemon that called ``setsid``
and double-forked: its parent exited, init is its parent now); a process in uninterruptible
sleep stops and dies only once it wakes (its children, if it forks just then, may be missed);
the calling process, never frozen nor killed (a guard walking its parent's tree, a worker its
own), whose other threads may fork after the last walk. Off Linux (no ``/proc``) only the root
is signalled.

Nothing here imports celery-plus or Celery: the deadline guard process loads this file
on its own (``deadline_guard.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")
#: Longest wait, per walk, for the processes just sent ``SIGSTOP`` to stop (one in
#: uninterruptible sleep stops only once it wakes; the kill goes on without it).
STOP_WAIT_S = 0.5
#: The most walks of one tree, and the longest they may go on: each freezes what the last
#: found, until one finds nothing new; a tree that still grows after either (a root that cannot
#: be frozen, forking on: the caller's own thread) is killed as far as it was found. A process
#: that hops from pid to pid (forks, then exits) slips past a walk now and then, and on a loaded
#: machine eight walks in a row once lost it (CI at 38bf1b7): 32 walks; the time bound, for a
#: tree each walk of which takes long, is checked between walks (a clock frozen by the caller's
#: tests still leaves the count).
MOST_WALKS = 32
WALKS_FOR_S = 1.0


def supported() -> bool:
    """Whether processes' parents can be read here (Linux's ``/proc``)."""
    return (PROC / "self" / "stat").exists()


def stop_tree(pid: int, signum: int = signal.SIGKILL) -> list[int]:
    """Stop process ``pid`` with ``signum`` and every process below it with ``SIGKILL``,
    all frozen first; returns the descendants killed. The calling process, if it is in
    the tree, is left out (use :func:`kill_own_descendants` for one's own tree)."""
    if pid == os.getpid():
        raise ValueError("stop_tree of the calling process: use kill_own_descendants")
    if not supported():
        _send(pid, signum)
        return []
    was_stopped = _state(pid) in _STOPPED
    _send(pid, signal.SIGSTOP)
    _wait_stopped({pid})
    try:
        descendants = _freeze_below(pid)
        for child in descendants:
            _send(child, signal.SIGKILL)
        _send(pid, signum)
    finally:
        if not was_stopped and signum != signal.SIGKILL:
            _send(pid, signal.SIGCONT)  # a SIGTERM waits until the process runs again
    return descendants


def kill_own_descendants(spare: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """``SIGKILL`` every process below the calling one (frozen first), before it exits or
    kills itself, but those in ``spare`` (and what is below them); returns them. The caller's
    own threads go on meanwhile: the walk repeats until it finds no new process (at most
    :data:`MOST_WALKS` times, for :data:`WALKS_FOR_S`)."""
    if not supported():
        return []
    descendants = _freeze_below(os.getpid(), spare)
    for child in descendants:
        _send(child, signal.SIGKILL)
    return descendants


#: ``/proc/<pid>/stat`` states of a process that runs no more: stopped, traced, zombie, dead.
_STOPPED = frozenset("TtZXx")


def _freeze_below(root: int, spare: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """Freeze every process below ``root`` (``root`` itself frozen already, or the caller)
    and return them, parents before children. Each process is frozen as soon as it is read
    (a process about to fork or exit has the least time to); each walk reads the children of
    every process found so far, and the walks stop once one finds none new (all found are
    stopped: the set is closed), or after :data:`MOST_WALKS` or :data:`WALKS_FOR_S`."""
    me = os.getpid()
    found: list[int] = []
    known = {root, me, *spare}
    give_up = time.monotonic() + WALKS_FOR_S
    for _ in range(MOST_WALKS):
        parents = {root, *found}
        grew = False
        while parents:
            new = set()
            for pid in _children(parents):
                if pid not in known:
                    _send(pid, signal.SIGSTOP)
                    known.add(pid)
                    new.add(pid)
            _wait_stopped(new)
            found.extend(sorted(new))
            grew = grew or bool(new)
            parents = new
        if not grew or time.monotonic() > give_up:
            break
    return found


def _children(parents: set[int]) -> Iterator[int]:
    """The processes whose parent is in ``parents``, each as soon as it is read."""
    if not (PROC / "thread-self" / "children").exists():
        yield from _children_by_stat(parents)
        return
    for parent in parents:
        try:
            tids = os.listdir(PROC / str(parent) / "task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                text = (PROC / str(parent) / "task" / tid / "children").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            yield from (int(pid) for pid in text.split())


def _children_by_stat(parents: set[int]) -> Iterator[int]:
    """:func:`_children` without ``children`` files: every process's parent, one scan."""
    for name in os.listdir(PROC):
        if name.isdigit() and _parent(int(name)) in parents:
            yield int(name)


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent, ...)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()  # the name may hold spaces and parentheses


def _state(pid: int) -> str:
    fields = _stat(pid)
    return fields[0] if fields else "X"


def _parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _wait_stopped(pids: set[int]) -> None:
    """Wait (at most :data:`STOP_WAIT_S`) until each of ``pids`` has stopped or is gone."""
    deadline = time.monotonic() + STOP_WAIT_S
    waiting = set(pids)
    while waiting:
        waiting = {pid for pid in waiting if _state(pid) not in _STOPPED}
        if not waiting or time.monotonic() > deadline:
            return
        time.sleep(0.001)


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


__all__ = ["kill_own_descendants", "stop_tree", "supported"]
