-- celery-plus durable store on PostgreSQL, migration 0014: three indexes for the admin at a
-- million jobs (docs/admin.md "Cost"). Partial: queries must spell the state literally.
-- Building them on a store with many jobs locks writes to `jobs` while they run.
--
-- The enqueued jobs of one task, in the claim index's order: a listing of one task's waiting
-- jobs (and its capped count) had no index, so at 1,000,000 waiting jobs the listing of a task
-- with ten of them read every row twice (1.1 to 2.4 s); it now reads the task's range. It
-- costs each publish one more index entry (docs/admin.md has the measured cost).
CREATE INDEX jobs_ready_by_name ON jobs (name, queue, score) WHERE state = 'enqueued';
-- The dead letters of each queue: the status's per-queue dead-letter counts over the count cap
-- found the queues by a loose scan that read every dead letter once per queue (1.3 to 2 s at
-- 100,000 dead letters). Written only when a job becomes a dead letter.
CREATE INDEX jobs_failed_by_queue ON jobs (queue) WHERE state = 'failed';
-- The dead letters of each task, newest first: the per-task breakdown counts each task's dead
-- letters (up to 100 tasks a load) and a task's dead-letter listing pages them; a task with few
-- of 100,000 dead letters read them all (0.1 to 0.2 s a task). Written only for dead letters.
CREATE INDEX jobs_failed_by_name ON jobs (name, finished_ms, id) WHERE state = 'failed';
--
-- (Schema only: no function changes.)
