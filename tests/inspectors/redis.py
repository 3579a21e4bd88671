"""The Redis store's inspector: its keys as ``stores/redis/lua/lib.lua`` lays them out.

A record is the hash ``P:job:{id}``; its envelope is in ``P:m:{id}`` (the compact layout,
``plus_redis_compact_records``; deflated with ``plus_redis_deflate``) or, in the hash layout of
older records, the hash's ``msg`` field.
"""

from __future__ import annotations

from typing import Any

from celery_plus.stores.redis.envelope import envelope_bytes
from tests.inspectors.base import Inspector

#: The index of each state that has one (the others are found by scanning the records).
INDEX = {"completed": "done", "failed": "dead", "running": "lease", "scheduled": "sched"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisInspector(Inspector):
    """Read-outs of one ``RedisBackend``'s keys (its prefix)."""

    @property
    def client(self) -> Any:
        return self.backend.client

    def key(self, *parts: str) -> str:
        return self.backend.key(*parts)  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, str] | None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.key("job", job_id))
        pipe.get(self.key("m", job_id))
        raw, message = pipe.execute()
        if not raw:
            return None
        if message is not None and b"msg" not in raw and "msg" not in raw:
            raw[b"msg"] = envelope_bytes(message)  # its own key (P:m:{id}), as one record
        return {_text(k): (v.decode(errors="replace") if isinstance(v, bytes) else v)
                for k, v in raw.items()}

    def holder(self, lock: str) -> str | None:
        value = self.client.get(self.key("u", lock))
        return None if value is None else _text(value)

    def holds(self) -> dict[str, str]:
        out: dict[str, str] = {}
        start = len(self.key("u")) + 1
        for key in self.client.scan_iter(self.key("u", "*"), count=1000):
            holder = self.client.get(key)
            if holder is not None:
                out[_text(key)[start:]] = _text(holder)
        return out

    def _deadline(self, key: str) -> int | None:
        """Server time + the key's PTTL, read atomically (None when the key is absent)."""
        deadline = int(self.backend._deadline_script(keys=[key], args=["0"])[1])
        return None if deadline < 0 else deadline

    def hold_deadline(self, lock: str) -> int | None:
        return self._deadline(self.key("u", lock))

    def transient_deadline(self, queue: str) -> int | None:
        return self._deadline(self.key("t", queue))

    def slot_holders(self, group: str) -> set[str]:
        return {_text(m) for m in self.client.smembers(self.key("slot", group))}

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        if state in INDEX:
            return [_text(i) for i in self.client.zrange(self.key(INDEX[state]), 0, limit - 1)]
        found: list[str] = []
        for key in self.client.scan_iter(self.key("job", "*"), count=1000):
            job_id = _text(key)[len(self.key("job")) + 1:]
            if _text(self.client.hget(key, "st") or b"") == state:
                found.append(job_id)
                if len(found) >= limit:
                    break
        return found

    def lease_deadline(self, job_id: str) -> int | None:
        score = self.client.zscore(self.key("lease"), job_id)
        return None if score is None else int(score)

    def blocked_groups(self) -> set[str]:
        """Members of P:blkgroups and groups of non-empty P:blk:{group} sets."""
        groups = {_text(g) for g in self.client.smembers(self.key("blkgroups"))}
        start = len(self.key("blk")) + 1
        for key in self.client.scan_iter(self.key("blk", "*"), count=1000):
            if self.client.zcard(key):
                groups.add(_text(key)[start:])
        return groups

    def force_state(self, job_id: str, state: str) -> None:
        key = self.key("job", job_id)
        if self.client.exists(key):
            self.client.hset(key, "st", state)
