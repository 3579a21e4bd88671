"""What ``pg_notify`` costs concurrent publishers, apart from celery-plus.

N processes each commit one-row insert transactions into a scratch schema, with and without a
``pg_notify`` in each transaction; prints commits per second for N = 1 and N = 8. PostgreSQL
serialises the commits of notifying transactions, so the notifying rows do not scale with N.

    python -m benchmarks.pg_notify_commits [--commits 2400]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import psycopg

from .throughput import PG_URL

SCHEMA = "bench_pg_notify"


def _publisher(notify: bool, commits: int, spans: mp.Queue) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        start = time.time()
        for i in range(commits):
            with conn.transaction():
                conn.execute("INSERT INTO t (v) VALUES (%s)", (i,))
                if notify:
                    conn.execute("SELECT pg_notify('bench', 'q:a')")
        spans.put((start, time.time()))


def commits_per_second(notify: bool, commits: int, publishers: int) -> float:
    spans: mp.Queue = mp.Queue()
    share = commits // publishers
    procs = [mp.Process(target=_publisher, args=(notify, share, spans))
             for _ in range(publishers)]
    for proc in procs:
        proc.start()
    found = [spans.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join()
    return share * publishers / (max(e for _, e in found) - min(s for s, _ in found))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2400)
    args = parser.parse_args(argv)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.t (id bigserial PRIMARY KEY, v int)")
        try:
            for notify in (False, True):
                for publishers in (1, 8):
                    rate = commits_per_second(notify, args.commits, publishers)
                    print(f"pg_notify {'yes' if notify else 'no ':3}  {publishers} "
                          f"connection(s): {rate:7.0f} commits/s")
        finally:
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
