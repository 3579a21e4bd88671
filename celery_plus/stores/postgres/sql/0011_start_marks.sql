-- celery-plus durable store on PostgreSQL, migration 0011: the worker's start mark of a
-- running claim (docs/admin.md "Reserved and running"): start_mark = token: its task started at
-- started_ms (moved there from the claim's time); -token: not started yet (reserved); NULL or
-- another claim's token: not known (started_ms is the claim's time, as before).
--
-- (Schema only: mark_start() and the settle() / heartbeat_verdicts() forms that carry the marks
-- are in ../functions/.)
ALTER TABLE jobs ADD COLUMN start_mark bigint;
