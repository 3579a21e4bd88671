-- celery-plus durable store on PostgreSQL, migration 0010: dead letters grouped by error (admin,
-- docs/admin.md). The exception type and the message's first line, each cut to 200 characters
-- (an index entry stays far below PostgreSQL's btree limit whatever a task raised),
-- spelled exactly as stores/sql_error_groups.py and postgres/admin.py spell them, so that the
-- groups are one aggregate over this index and a group's dead letters one range of it.
--
-- (Schema only: no function changes.)
CREATE INDEX jobs_error_groups ON jobs (
    (left(COALESCE(exc_type, ''), 200)),
    (left(split_part(COALESCE(exc_message, ''), E'\n', 1), 200)),
    finished_ms, id)
    WHERE state = 'failed';
