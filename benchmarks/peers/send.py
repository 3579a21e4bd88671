"""Enqueue N counted jobs in this process and print the seconds it took.

    python -m benchmarks.peers.send SYSTEM single|batch N

``single`` is one call a job (``delay()``, ``send()``, ``defer()``, …); ``batch`` the system's
batch enqueue in blocks of :data:`BLOCK`. Job 0 is sent first, untimed (connections,
declarations); the rate is over jobs 1 to N - 1.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable

BLOCK = 500


def _celery() -> tuple[Callable[[int, int], None], Callable[[int, int, int], None]]:
    from benchmarks.bench_app import app, counted

    def one(i: int, n: int) -> None:
        counted.delay(i, n)

    def block(start: int, stop: int, n: int) -> None:
        with app.publish_batch():  # type: ignore[attr-defined]
            for i in range(start, stop):
                counted.delay(i, n)

    return one, block


def senders(module: str) -> tuple[Callable[[int, int], None], Callable[[int, int, int], None]]:
    """The single and batch enqueue of a system's app module."""
    if module == "benchmarks.bench_app":
        return _celery()
    app = importlib.import_module(module)
    return app.send, getattr(app, "send_batch", None)


def main() -> None:
    module, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    one, block = senders(module)
    one(0, n)
    t0 = time.perf_counter()
    if mode == "batch":
        for start in range(1, n, BLOCK):
            block(start, min(start + BLOCK, n), n)
    else:
        for i in range(1, n):
            one(i, n)
    print(time.perf_counter() - t0)


if __name__ == "__main__":
    main()
