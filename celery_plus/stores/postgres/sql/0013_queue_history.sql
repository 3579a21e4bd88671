-- celery-plus durable store on PostgreSQL, migration 0013: the admin's queue history
-- (stores/admin_base/queue_history.py, docs/admin.md "Queue depth and wait over time"): one
-- sample per minute bucket of the store's clock, written by the worker whose maintenance turn
-- it is, kept a day. sample: JSON {"queue": [enqueued jobs, oldest waiting since ms]}.
CREATE TABLE queue_history (
    bucket_ms bigint PRIMARY KEY,
    at_ms     bigint NOT NULL,
    sample    text NOT NULL
);
