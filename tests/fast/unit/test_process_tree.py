"""Issue #27: a stopped run's processes stop with it (``runtime/process_tree.py``), on real
process trees: a task's ``subprocess``, a shell's background job, a child in a session of its
own, a tree that forks on, a process that hops from pid to pid.

The oracle: every process of a tree inherits the write end of the test's pipe, so the pipe's
end of file comes once all of them are dead (a zombie holds no file). A scan of ``/proc``
would miss a process that changes its pid as it is read."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_plus.runtime import process_tree

pytestmark = pytest.mark.skipif(not process_tree.supported(), reason="needs Linux's /proc")

#: A "pool process": starts children of three kinds, says their pids, then sleeps.
TREE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    if sys.argv[1:] == ["term"]:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
    kids = [subprocess.Popen(["sleep", "60"]),
            subprocess.Popen(["sh", "-c", "sleep 61 & wait"]),
            subprocess.Popen(["setsid", "sleep", "62"])]
    time.sleep(0.3)  # the shell's own child is started
    print(" ".join(str(k.pid) for k in kids), flush=True)
    time.sleep(60)
""")

#: Forks without end (a few hundred processes a second): every child forks a grandchild,
#: and both sleep.
FORKS_ON = textwrap.dedent("""
    import os, time
    print("forking", flush=True)
    while True:
        if os.fork() == 0:
            os.fork()
            time.sleep(60)
            os._exit(0)
""")

#: Hops: its one descendant forks and exits, again and again, a new pid each time (a
#: subreaper keeps each hop in the tree; SIGCHLD ignored reaps the hops gone).
HOPS = textwrap.dedent("""
    import ctypes, os, signal, time
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    if os.fork() == 0:
        while True:
            if os.fork() != 0:
                os._exit(0)
    print("hopping", flush=True)
    time.sleep(60)
""")

#: How long the processes of a stopped tree may take to die (and close the pipe).
GONE_S = 10.0


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes started by a test, each in a session (and group) of its own; the group is
    killed after the test (a failed test's left-overs die: a group's kill reaches a process
    however fast it hops)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def start(spawned: list[subprocess.Popen[str]], script: str, *args: str
          ) -> tuple[subprocess.Popen[str], str]:
    """Start ``script`` in a session of its own; its first line."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    spawned.append(proc)
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


def all_gone(proc: subprocess.Popen[str]) -> str:
    """Wait until every process of ``proc``'s tree is dead (the pipe's end); the rest of
    its output."""
    try:
        out, _ = proc.communicate(timeout=GONE_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a process of {proc.pid}'s tree still runs") from None
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "X"


def test_a_stopped_process_takes_its_subprocesses_with_it(
        spawned: list[subprocess.Popen[str]]) -> None:
    proc, line = start(spawned, TREE)
    below = process_tree.stop_tree(proc.pid)
    all_gone(proc)
    assert proc.returncode == -signal.SIGKILL
    # The three children, whatever their sessions, and the shell's own sleep.
    assert {int(pid) for pid in line.split()} <= set(below) and len(below) == 4, below


def test_a_kernel_without_children_files_is_walked_by_each_processs_parent(
        spawned: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``/proc/<pid>/stat`` reader (kernels without CONFIG_PROC_CHILDREN; this one has
    the files, so the other tests drive the files' reader), on a real tree."""
    monkeypatch.setattr(process_tree, "_children", process_tree._children_by_stat)
    proc, line = start(spawned, TREE)
    below = process_tree.stop_tree(proc.pid)
    all_gone(proc)
    assert {int(pid) for pid in line.split()} <= set(below) and len(below) == 4, below


def test_a_tree_that_forks_on_is_frozen_as_it_is_walked_and_nothing_escapes(
        spawned: list[subprocess.Popen[str]]) -> None:
    proc, _ = start(spawned, FORKS_ON)
    time.sleep(0.3)  # a tree of forks grows meanwhile (nothing to await: it never stops)
    below = process_tree.stop_tree(proc.pid)
    assert len(below) > 10, below
    all_gone(proc)


def test_a_process_that_hops_from_pid_to_pid_is_caught(
        spawned: list[subprocess.Popen[str]]) -> None:
    """Each process found is frozen before the next read: a hop found is caught where it
    is. (One walk that kills what it found, unfrozen, misses the hop made meanwhile: this
    test failed so.)"""
    for _ in range(5):
        proc, _ = start(spawned, HOPS)
        process_tree.stop_tree(proc.pid)
        all_gone(proc)


def test_a_sigterm_reaches_the_root_once_its_subprocesses_are_dead(
        spawned: list[subprocess.Popen[str]]) -> None:
    """Celery's terminate (SIGTERM) of a pool process whose lease was lost: the root is
    continued after the freeze, so its handler runs."""
    proc, line = start(spawned, TREE, "term")
    below = process_tree.stop_tree(proc.pid, signal.SIGTERM)
    all_gone(proc)
    assert proc.returncode == 7  # its own SIGTERM handler
    assert {int(pid) for pid in line.split()} <= set(below)


def test_a_root_frozen_by_another_stays_frozen(spawned: list[subprocess.Popen[str]]) -> None:
    """A SIGTERM to a process someone else stopped waits for them (as before), but the
    processes below it die now."""
    proc, line = start(spawned, TREE, "term")
    os.kill(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while _state(proc.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    below = process_tree.stop_tree(proc.pid, signal.SIGTERM)
    assert {int(pid) for pid in line.split()} <= set(below)
    time.sleep(0.2)  # nothing to await: the check is that it stays stopped
    assert _state(proc.pid) == "T"
    os.kill(proc.pid, signal.SIGCONT)
    all_gone(proc)
    assert proc.returncode == 7


def test_a_process_kills_its_own_descendants_and_goes_on(
        spawned: list[subprocess.Popen[str]]) -> None:
    script = TREE.replace("time.sleep(60)", textwrap.dedent("""
        from celery_plus.runtime import process_tree
        below = process_tree.kill_own_descendants()
        print(len(below), " ".join(str(k.wait()) for k in kids), flush=True)
    """))
    proc, _ = start(spawned, script)
    out = all_gone(proc)
    assert proc.returncode == 0
    assert out.split() == ["4", "-9", "-9", "-9"], out  # the shell's sleep was the fourth


#: A guard: walks its parent's tree, itself in it, with a child of its own.
GUARD = textwrap.dedent("""
    import os, subprocess, sys
    from celery_plus.runtime import process_tree
    own = subprocess.Popen(["sleep", "60"])
    below = process_tree.stop_tree(os.getppid())
    print(below == [int(sys.argv[1])], own.poll() is None, flush=True)
    own.kill()
""")


def test_the_calling_process_is_never_frozen_in_the_tree_it_walks(
        spawned: list[subprocess.Popen[str]]) -> None:
    """A guard stops its worker's tree: not itself, nor what it started."""
    worker = textwrap.dedent("""
        import subprocess, sys, time
        sleeper = subprocess.Popen(["sleep", "60"])
        subprocess.Popen([sys.executable, "-c", sys.argv[1], str(sleeper.pid)])
        print("started", flush=True)
        time.sleep(60)
    """)
    proc, _ = start(spawned, worker, GUARD)
    out = all_gone(proc)
    assert proc.returncode == -signal.SIGKILL
    assert out.split() == ["True", "True"], out


def test_children_are_read_from_the_kernels_children_files_where_it_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``/proc/<pid>/task/<tid>/children`` reader (CONFIG_PROC_CHILDREN; not every kernel
    has it), on a copy of its layout: the children of every thread of each parent."""
    (tmp_path / "thread-self").mkdir()
    (tmp_path / "thread-self" / "children").write_text("")
    for pid, tid, children in [(10, 10, "11 12 "), (10, 13, "14 "), (11, 11, ""),
                               (20, 20, "21 ")]:
        (tmp_path / str(pid) / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
        (tmp_path / str(pid) / "task" / str(tid) / "children").write_text(children)
    monkeypatch.setattr(process_tree, "PROC", tmp_path)
    assert set(process_tree._children({10, 11, 99})) == {11, 12, 14}


def test_off_linux_only_the_root_is_signalled(spawned: list[subprocess.Popen[str]],
                                              monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """The documented fallback: no ``/proc``, no walk (the group's kill after the test
    ends the children)."""
    proc, line = start(spawned, TREE)
    monkeypatch.setattr(process_tree, "PROC", tmp_path / "no-proc")
    assert process_tree.stop_tree(proc.pid) == []
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert all(_state(int(pid)) not in "ZX" for pid in line.split())
    for pid in line.split():  # the one in a session of its own
        os.kill(int(pid), signal.SIGKILL)
