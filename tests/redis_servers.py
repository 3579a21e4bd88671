"""Private ``redis-server`` processes for tests that break, secure or front a store.

The shared Redis on 6379 is never stopped or reconfigured: tests that need a server to go
down, to speak TLS or to sit behind Sentinel start their own here, on a free port, in a
temporary directory, and stop it when they end.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support import wait_until

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Certificates:
    """A self-signed CA and a server certificate for 127.0.0.1 / localhost signed by it."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> Certificates:
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca = directory / "ca.key", directory / "ca.crt"
        key, csr = directory / "server.key", directory / "server.csr"
        cert = directory / "server.crt"
        ext = directory / "san.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        steps = [
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=celery-plus test CA", "-keyout", ca_key, "-out", ca],
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", key, "-out", csr],
            ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", cert],
        ]
        for step in steps:
            subprocess.run([str(s) for s in step], check=True, capture_output=True)
        return cls(ca=ca, cert=cert, key=key)


class RedisServer:
    """One ``redis-server`` (or ``--sentinel``) process of a test."""

    def __init__(self, directory: Path, *, tls: Certificates | None = None,
                 sentinel_of: RedisServer | None = None, master_name: str = "mymaster",
                 unix_socket: bool = False) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = tls
        self.sentinel_of = sentinel_of
        self.master_name = master_name
        #: The Unix socket the server listens on too, if asked for.
        self.socket_path = directory / "redis.sock" if unix_socket else None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def _config(self) -> Path:
        lines = [f"dir {self.directory}", "save \"\"", "appendonly no", "bind 127.0.0.1",
                 f"logfile {self.directory / 'redis.log'}"]
        if self.tls is not None:
            lines += ["port 0", f"tls-port {self.port}", f"tls-cert-file {self.tls.cert}",
                      f"tls-key-file {self.tls.key}", f"tls-ca-cert-file {self.tls.ca}",
                      "tls-auth-clients no"]
        else:
            lines.append(f"port {self.port}")
        if self.socket_path is not None:
            lines += [f"unixsocket {self.socket_path}", "unixsocketperm 700"]
        if self.sentinel_of is not None:
            master = self.sentinel_of
            lines += [f"sentinel monitor {self.master_name} 127.0.0.1 {master.port} 1",
                      f"sentinel down-after-milliseconds {self.master_name} 5000"]
        path = self.directory / ("sentinel.conf" if self.sentinel_of else "redis.conf")
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> RedisServer:
        args = [REDIS_SERVER, str(self._config())]
        if self.sentinel_of is not None:
            args.append("--sentinel")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout=20, message=f"redis-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            return False

    def client(self) -> redis.Redis:
        if self.tls is not None:
            return redis.Redis(host="127.0.0.1", port=self.port, ssl=True,
                               ssl_ca_certs=str(self.tls.ca))
        return redis.Redis(host="127.0.0.1", port=self.port)

    def log(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def redis_server(directory: Path, **kwargs: object) -> Iterator[RedisServer]:
    server = RedisServer(directory, **kwargs)  # type: ignore[arg-type]
    try:
        yield server.start()
    finally:
        server.stop()


def wait_closed(port: int, timeout: float = 10) -> None:
    """Until nothing listens on ``port`` any more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"port {port} still open")
