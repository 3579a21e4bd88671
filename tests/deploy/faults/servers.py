"""Stores the fault suite starts and breaks itself: never the machine's shared services.

* :class:`RedisServer`: a ``redis-server`` on a free port, with AOF (``appendfsync always``:
  every acknowledged write is on disk) or without (snapshots on a clean shutdown only);
* :class:`PostgresCluster`: a PostgreSQL cluster made with ``initdb`` and run with
  ``pg_ctl`` on a free port, as the ``postgres`` user when the suite runs as root;
* :class:`SmallDisk`: a small tmpfs mounted for a SQLite store, filled and freed on demand
  (root only; :func:`small_disk_available` says whether this machine can).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support import wait_until


def _pg_bin() -> Path:
    """PostgreSQL's server programs: ``PLUS_FAULT_PG_BIN``, else Debian's newest install."""
    if os.environ.get("PLUS_FAULT_PG_BIN"):
        return Path(os.environ["PLUS_FAULT_PG_BIN"])
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                       key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return installed[-1].parent if installed else Path("/usr/lib/postgresql/15/bin")


PG_BIN = _pg_bin()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server: ``crash`` (SIGKILL), ``stop`` (SHUTDOWN SAVE), ``start``."""

    def __init__(self, folder: Path, *, aof: bool) -> None:
        self.folder = folder
        self.aof = aof
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--save", "", "--protected-mode", "no",
                "--logfile", str(self.folder / "redis.log")]
        if self.aof:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(self._answers, timeout=20, message=f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        try:
            with contextlib.closing(redis.Redis(port=self.port, socket_timeout=1)) as client:
                return bool(client.ping()) and client.info("persistence")["loading"] == 0
        except redis.exceptions.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def crash(self) -> None:
        """SIGKILL: what was acknowledged survives only with AOF."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        """A clean shutdown that writes a snapshot (what a service manager's stop does)."""
        assert self.proc is not None
        with contextlib.closing(self.client()) as client, \
                contextlib.suppress(redis.exceptions.ConnectionError):
            client.shutdown(save=True)
        self.proc.wait(timeout=30)
        self.proc = None

    def break_for(self, seconds: float) -> None:
        """Take the server away for ``seconds`` (crash with AOF, clean stop without)."""
        if self.aof:
            self.crash()
        else:
            self.stop()
        time.sleep(seconds)
        self.start()

    def kill_clients(self) -> int:
        """Close every other client's connection (``CLIENT KILL``); how many."""
        with contextlib.closing(self.client()) as client:
            return int(client.execute_command("CLIENT", "KILL", "TYPE", "normal",
                                              "SKIPME", "yes"))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class PostgresCluster:
    """A private PostgreSQL cluster (``initdb`` + ``pg_ctl``) on a free port."""

    def __init__(self, max_connections: int = 200, prefix: str = "plus-fault-pg-",
                 port: int | None = None) -> None:
        self.max_connections = max_connections
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self.data = self.folder / "data"
        self.port = port or free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U",
                                     "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c full_page_writes=off "
                   f"-c max_connections={self.max_connections}")
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o",
                                     options, "-l", str(self.folder / "pg.log"), "-w", "-t",
                                     "60", "start"]), check=True, stdout=subprocess.DEVNULL)

    def create_database(self, name: str) -> str:
        """Create database ``name`` (unless it exists); its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                 (name,)).fetchone()
            if found is None:
                conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self, mode: str = "immediate") -> None:
        """``immediate`` is a crash (recovery from the WAL on start); ``fast`` a clean stop."""
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode,
                                     "-w", "-t", "60", "stop"]), check=True,
                       stdout=subprocess.DEVNULL)

    def break_for(self, seconds: float) -> None:
        self.stop()
        time.sleep(seconds)
        self.start()

    def terminate_sessions(self) -> int:
        """``pg_terminate_backend`` of every other client session; how many."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
                "pg_backend_pid() AND backend_type = 'client backend'").fetchall()
        return sum(1 for (done,) in rows if done)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def small_disk_available() -> bool:
    """True when this process may mount a tmpfs (root on Linux, mount(8) present)."""
    return os.geteuid() == 0 and shutil.which("mount") is not None


class SmallDisk:
    """A tmpfs of ``size_kb`` at ``folder``, made full with a filler file and freed again."""

    def __init__(self, folder: Path, size_kb: int) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0777", "tmpfs",
                        str(folder)], check=True)
        self.filler = folder / "filler"

    def fill(self) -> None:
        """Take every free byte (the store can no longer grow)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 16, 4096, 1):
                chunk = b"\0" * size
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, chunk)
        finally:
            os.close(fd)

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def used_kb(self) -> int:
        usage = shutil.disk_usage(self.folder)
        return (usage.total - usage.free) // 1024

    def close(self) -> None:
        self.free()
        for _ in range(50):
            done = subprocess.run(["umount", str(self.folder)], stderr=subprocess.DEVNULL)
            if done.returncode == 0:
                return
            time.sleep(0.2)  # a process still has a file open there
        subprocess.run(["umount", "-l", str(self.folder)], check=False)


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
