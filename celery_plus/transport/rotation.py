"""Fair order across queues: each pass starts one queue further than the last."""

from __future__ import annotations


def rotate(queues: list[str], order: list[str]) -> list[str]:
    """``queues`` starting one further than last time; ``order`` keeps the place between
    calls (updated in place)."""
    if len(queues) < 2:
        return queues
    current = [q for q in order if q in queues]
    current += [q for q in queues if q not in current]
    current.append(current.pop(0))
    order[:] = current
    return current
