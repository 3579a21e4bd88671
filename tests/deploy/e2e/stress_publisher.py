"""One publisher process of the SQLite stress test: prints accepted and coalesced ids."""

from __future__ import annotations

import json
import sys

from tests.deploy.e2e.stress_app import dedup, work


def main(worker_index: int, count: int) -> None:
    accepted, coalesced = [], 0
    for i in range(count):
        n = worker_index * count + i
        every_fifth = i % 5 == 0
        result = dedup.delay(f"key-{n % 40}", n) if every_fifth else work.delay(f"c{n % 20}", n)
        if result.deduplicated:
            coalesced += 1
        else:
            accepted.append(result.id)
    print(json.dumps({"accepted": accepted, "coalesced": coalesced}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
