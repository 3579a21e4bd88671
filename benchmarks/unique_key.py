"""Time of one whole-payload unique key for a large argument: the seed's FNV-1a 64 against
BLAKE2b-128 (issue #15).

``python -m benchmarks.unique_key --mb 5 --rounds 3`` prints the best of ``rounds`` for the
canonical JSON alone, for the key as computed now (canonical JSON + BLAKE2b-128) and for the
previous hash over the same canonical JSON (pure-Python FNV-1a 64, kept here only to compare).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from celery_plus.send.keys import canonical_json, payload_digest, unique_key


def fnv1a_64(text: str) -> int:
    """The previous key hash: FNV-1a 64 of the UTF-8 bytes, one Python step per byte."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8", "surrogatepass"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def best_of(rounds: int, call: Callable[[], object]) -> float:
    """The fastest of ``rounds`` calls, in seconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="argument size in MB")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    payload = {"document": "x" * int(opts.mb * 1_000_000), "n": 1}
    text = canonical_json(payload)
    rows = {
        "canonical JSON": lambda: canonical_json(payload),
        "BLAKE2b-128 of it": lambda: payload_digest(text),
        "FNV-1a 64 of it (previous)": lambda: fnv1a_64(text),
        "unique_key (now)": lambda: unique_key(payload, None),
    }
    print(f"{len(text.encode()) / 1e6:.1f} MB of canonical JSON, best of {opts.rounds}:")
    for label, call in rows.items():
        print(f"  {label:28} {best_of(opts.rounds, call) * 1000:10.2f} ms")


if __name__ == "__main__":
    main()
