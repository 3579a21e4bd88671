-- celery-plus durable store on PostgreSQL, migration 0009: paused queues (admin pause /
-- resume, docs/admin.md). claim() takes no job of a queue listed here.
--
-- (Schema only: queue_pause() and the claim() that reads this table are in ../functions/.)
CREATE TABLE paused_queues (
    queue     text PRIMARY KEY,
    paused_ms bigint NOT NULL
);
