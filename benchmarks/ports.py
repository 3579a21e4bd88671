"""Ports for the benchmarks' private servers, in the ranges set aside for them on the shared
development machine (Redis 7200 to 7299, PostgreSQL 5500 to 5510)."""

from __future__ import annotations

import socket

REDIS_PORTS = range(7200, 7300)
POSTGRES_PORTS = range(5500, 5511)


def free_port(ports: range) -> int:
    """The first port of ``ports`` nothing listens on or holds (raises if none is free)."""
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
