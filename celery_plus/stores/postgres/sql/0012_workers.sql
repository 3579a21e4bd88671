-- celery-plus durable store on PostgreSQL, migration 0012: the Celery workers' own records, one
-- per node name, written by each worker's lease keeper every heartbeat interval (the admin's
-- workers page and health, docs/admin.md "Workers"). info: host, pid, queues, interval_ms.
CREATE TABLE workers (
    node       text PRIMARY KEY,
    info       jsonb NOT NULL,
    started_ms bigint NOT NULL,
    at_ms      bigint NOT NULL
);
