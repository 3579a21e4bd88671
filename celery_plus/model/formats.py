"""The stored message formats, by name, and which of them this release reads.

A stored job's message is in one of these formats; a worker reads the formats its release
knows and gives back any other (``transport/envelopes.py``). Each worker announces what it
reads in its record (``WorkerBeat.reads``), so a publisher can leave a newer format alone
while a live worker cannot read it (``stores/readers.py``).

* :data:`JSON`: kombu's envelope as JSON text, as published (every store; the Redis hash
  layout);
* :data:`Z1`: the Redis compact layout: the envelope deflated against dictionary 1 behind the
  mark ``\\0z1``, in its own key (``stores/redis/envelope.py``).

A later release adds a format as a new name here, read by every release before any writes it.
"""

from __future__ import annotations

JSON = "json"
Z1 = "z1"
#: What a worker of this release reads (announced in its record).
READS: tuple[str, ...] = (JSON, Z1)
#: What a worker whose record announces nothing is taken to read: the releases that keep
#: worker records without announcing formats all read both (their records came after the
#: compact layout). A worker with no record at all (a release before worker records, or
#: plain Celery) is not seen: docs/upgrading.md says what a rolling upgrade needs then.
UNANNOUNCED: tuple[str, ...] = (JSON, Z1)
