"""A private Redis Cluster for tests: 3 primaries and 3 replicas on loopback ports 7100-7199.

Started under a temporary directory (``redis-server --cluster-enabled yes`` six times, then
``redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes``) and killed at the end.
The shared Redis on 6379 is never touched. Each pytest-xdist worker takes its own block of
ports (``gw0`` 7100-7105, ``gw1`` 7110-7115, ..., or the next free block), held by a lock file
per block while its cluster runs; the failover runs use 7140-7145 and 7150-7155, the benchmark
7190-7195.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import redis
from redis.cluster import RedisCluster

from tests.redis_servers import REDIS_SERVER, wait_closed
from tests.support import wait_until

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
NODES = 6
#: The URL of the cluster the tests use (set by the ``redis_cluster`` fixture, or by you).
CLUSTER_URL_ENV = "PLUS_TEST_REDIS_CLUSTER"
#: The tests sharing the session's local cluster run on one xdist worker: one cluster started,
#: not one per worker.
CLUSTER_GROUP = pytest.mark.xdist_group("redis-cluster")


#: Port blocks of the sessions' clusters (7140-7155 and 7190 are the full runs' and the
#: benchmark's own).
BLOCKS = (7100, 7110, 7120, 7130, 7160, 7170)


def _free(port: int) -> bool:
    """Nothing listens on ``port`` (a socket in TIME_WAIT does not count, as for redis)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve_block(first: int | None = None) -> tuple[int, IO[str]]:
    """A block of ports for a cluster and the lock file that holds it (keep it open while
    the cluster runs): ``first`` if given, else the first block, tried from the pytest-xdist
    worker's own (``gw0`` 7100, ``gw1`` 7110, ...), that no other test process holds and
    whose ports (each node's and its cluster bus port, +10000) are free."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = int(worker) % len(BLOCKS) if worker.isdigit() else 0
    candidates = [first] if first else [*BLOCKS[start:], *BLOCKS[:start]]
    for block in candidates:
        lock = open(Path(tempfile.gettempdir()) / f"plus-redis-cluster-{block}.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        if all(_free(p) and _free(p + 10_000) for p in range(block, block + NODES)):
            return block, lock
        lock.close()
    raise RuntimeError(f"no free block of {NODES} ports among {candidates}")


class LocalCluster:
    """Six ``redis-server`` processes in cluster mode; :meth:`kill` one to fail it over."""

    def __init__(self, directory: Path, port: int | None = None, *,
                 node_timeout_ms: int = 1000) -> None:
        self.directory = directory
        block, self._lock = reserve_block(port)
        self.ports = [block + i for i in range(NODES)]
        self.node_timeout_ms = node_timeout_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The store URL: ``plus+redis+cluster://`` with every node as a seed."""
        first, *rest = self.ports
        seeds = "".join(f";redis+cluster://127.0.0.1:{p}" for p in rest)
        return f"plus+redis+cluster://127.0.0.1:{first}/0{seeds}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def _start_node(self, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        conf = node_dir / "redis.conf"
        conf.write_text("\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {node_dir}", "save \"\"",
            "appendonly no", "cluster-enabled yes", f"cluster-config-file {node_dir}/nodes.conf",
            f"cluster-node-timeout {self.node_timeout_ms}", f"logfile {node_dir}/redis.log",
            "cluster-require-full-coverage no",
        ]) + "\n")
        self.procs[port] = subprocess.Popen([REDIS_SERVER, str(conf)],
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)

    def _pings(self, port: int) -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=0.5).ping())
        except redis.exceptions.ConnectionError:
            proc = self.procs[port]
            assert proc.poll() is None, (self.directory / str(port) / "redis.log").read_text()
            return False

    def start(self) -> LocalCluster:
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            wait_until(lambda p=port: self._pings(p), timeout=20, message=f"node {port}")
        subprocess.run([REDIS_CLI, "--cluster", "create",
                        *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        wait_until(self.healthy, timeout=30, message="cluster state ok")
        # A replica that never synced cannot be promoted: wait for every link to be up.
        wait_until(self.replicas_synced, timeout=30, message="replicas in sync")
        return self

    def replicas_synced(self) -> bool:
        """Every live replica's link to its primary is up."""
        for port in self.live_ports():
            info = redis.Redis(port=port).info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok`` and three primaries cover the slots."""
        for port in self.live_ports():
            info = redis.Redis(port=port, decode_responses=True).cluster("INFO")
            if info.get("cluster_state") != "ok":
                return False
        return len(self.primaries()) == 3

    def live_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def primaries(self) -> list[int]:
        """Ports of the live primaries, as the first live node sees them."""
        port = self.live_ports()[0]
        nodes = redis.Redis(port=port, decode_responses=True).cluster("NODES")
        return sorted(int(addr.rsplit(":", 1)[1].split("@")[0]) for addr, node in nodes.items()
                      if "master" in node["flags"] and "fail" not in node["flags"]
                      and node["connected"] and node["slots"])

    def role(self, port: int) -> str:
        """``master`` or ``slave``, as the node on ``port`` says."""
        return str(redis.Redis(port=port, decode_responses=True).info("replication")["role"])

    def replica_of(self, port: int) -> int:
        """The port of the replica of the primary on ``port``."""
        nodes = redis.Redis(port=port, decode_responses=True).cluster("NODES")
        ports = {node["node_id"]: int(addr.rsplit(":", 1)[1].split("@")[0])
                 for addr, node in nodes.items()}
        primary = next(i for i, p in ports.items() if p == port)
        return next(ports[node["node_id"]] for node in nodes.values()
                    if node["master_id"] == primary)

    def freeze(self, port: int, frozen: bool) -> None:
        """Stop (SIGSTOP) or resume (SIGCONT) the node on ``port``: a replica that lags."""
        self.procs[port].send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.live_ports()[0])

    def kill(self, port: int) -> None:
        """``kill -9`` the node on ``port`` (no goodbye, no final write)."""
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again (same directory and cluster config file)."""
        self._start_node(port)
        wait_until(lambda: self._pings(port), timeout=20, message=f"node {port} again")

    def stop(self) -> None:
        """Kill every node started (all of them first, whatever fails), then wait until
        their ports are closed."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        try:
            for port, proc in self.procs.items():
                proc.wait(timeout=10)
                wait_closed(port)
        finally:
            self._lock.close()


@contextlib.contextmanager
def local_cluster(directory: Path, port: int | None = None,
                  **kwargs: int) -> Iterator[LocalCluster]:
    cluster = LocalCluster(directory, port, **kwargs)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
