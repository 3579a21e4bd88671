-- celery-plus durable store on SQLite: the schema (idempotent; run by stores/sqlite/backend.py).
--
-- Same records and state machine as the Redis store (lua/lib.lua): one row per job whose
-- `state` column replaces Redis's per-state sorted sets, so an index on (state, ...) is each
-- of them. Every state change is one BEGIN IMMEDIATE transaction. Times are ms since the
-- epoch from the host clock (SQLite is single-host: every process shares that clock).
--
-- jobs        one record per task id (Redis P:job:{id}; field names in [brackets])
--   id              task id
--   queue [q]       queue name                      name [name]  task name
--   msg [msg]       kombu envelope (JSON bytes), delivered exactly as stored
--   state [st]      enqueued|scheduled|blocked|running|completed|failed|canceled|discarded
--   score [score]   order in its queue: priority * PRIORITY_FACTOR + seq (lower first;
--                   model/rules.py); blocked jobs keep it
--   token [tok]     lease token of the last claim (fences heartbeats, settles, continuation);
--                   from meta 'token', so never repeated for an id; NULL until claimed
--   deliveries [dl] deliveries of the current message   max_deliveries [mdl]  limit (0 = none)
--   unique_lock [uk] unique_window [uw] unique_ttl_ms [ut]   unique key, pending|running|ttl, ttl
--   conc_group [cg] conc_limit [cl]   concurrency group ('' = none), slot limit
--                   (uk uw ut cg cl are NULL for a job first published with neither a unique
--                   key nor a group, as publish.lua leaves them out of the hash)
--   due_ms [due] enqueued_ms [enq] started_ms [start] finished_ms [fin]   timestamps
--                   (due: eta, 0 = none; fin: completed / dead-lettered / canceled time)
--   worker [wk]     worker holding (or that last held) the claim
--   lease_expires_ms  lease deadline while running (Redis P:lease), NULL otherwise
--   reason [reason] exc_type [etype] exc_message [emsg] traceback [tb]   dead-letter details
--   history [hist]  JSON array of attempts (at most HISTORY_MAX, model/rules.py)
--   rate_group [rg] rate_limit [rl] rate_window_ms [rw]   cluster rate limit (NULL = none)
--   rate_parked     1 while blocked because its rate group's window was full (Redis
--                   P:rblk:{group}); 0 otherwise (these four are added by stores/sqlite/backend.py
--                   to stores made before them: ADDED_COLUMNS)
--   A NULL column is a field the Redis hash does not have.
-- holds       unique holds (Redis P:u:{lock})
--   lock            unique key     holder  task id holding it
--   expires_ms      the hold counts as absent once expires_ms < now (ttl window or backstop)
-- slots       concurrency slots taken (Redis P:slot:{group})
--   conc_group, job_id   one row per running job holding a slot of the group
-- transient   remote-control / reply / event messages (Redis P:t:{queue} lists)
--   id              insertion order      queue   queue name      body  kombu message bytes
--   expires_ms      a queue's messages expire 300 s after its last push
-- bindings    fanout / topic bindings (Redis P:bind:{exchange})
--   exchange, binding    the binding string (routing key, pattern, queue)
-- binding_deadlines  when a transient queue's binding lapses unless bound again (Redis
--   P:bindttl:{exchange}); a binding without a row here is permanent
--   exchange, binding, expires_ms
-- transient_marks    queues declared transient, so publishers that never declared them know
--   (Redis P:tmark:{queue}): queue, expires_ms
-- rate_claims the claims counting in each rate group's window (Redis P:rate:{group} and
--   P:ratep:{group}): rate_group, job_id, token, started (1: at_ms is its task's start;
--   0: not started yet, at_ms is its claim's first lease deadline)
-- rate_wake   rate groups with parked jobs, by when their window next has room (P:rwake)
-- leases      role leases (Redis P:lead:{role}): role, holder, expires_ms
-- schedules   periodic schedule entries (Redis P:beat:{name}): name, last_due_ms, next_due_ms,
--             paused, task, schedule, last_job, fired
-- paused_queues  queues no claim takes jobs from (Redis P:paused): queue, paused_ms
-- meta        counters and flags
--   key, value      'seq' (FIFO tie-break), 'token' (store-wide lease token counter), 'stats:<name>' (deduplicated, recovered,
--                   dead_lettered, blocked), 'maint' (ms until which maintenance is taken)

CREATE TABLE IF NOT EXISTS jobs (
    id               TEXT PRIMARY KEY,
    queue            TEXT NOT NULL,
    name             TEXT NOT NULL DEFAULT '',
    msg              BLOB NOT NULL,
    state            TEXT NOT NULL,
    score            INTEGER NOT NULL,
    token            INTEGER,
    deliveries       INTEGER NOT NULL DEFAULT 0,
    max_deliveries   INTEGER NOT NULL DEFAULT 0,
    unique_lock      TEXT,
    unique_window    TEXT,
    unique_ttl_ms    INTEGER,
    conc_group       TEXT,
    conc_limit       INTEGER,
    due_ms           INTEGER NOT NULL DEFAULT 0,
    enqueued_ms      INTEGER NOT NULL,
    started_ms       INTEGER,
    finished_ms      INTEGER,
    worker           TEXT,
    lease_expires_ms INTEGER,
    reason           TEXT,
    exc_type         TEXT,
    exc_message      TEXT,
    traceback        TEXT,
    history          TEXT
);

-- claim: an index range scan per queue, in score order.
CREATE INDEX IF NOT EXISTS jobs_by_queue ON jobs (state, queue, score);
-- promotion of due scheduled jobs; next due time.
CREATE INDEX IF NOT EXISTS jobs_by_due ON jobs (state, due_ms);
-- recovery of expired leases.
CREATE INDEX IF NOT EXISTS jobs_by_lease ON jobs (state, lease_expires_ms);
-- pruning of completed / failed / canceled records by age and count.
-- also the admin's listings of finished states, newest first (ties by id) without a sort;
-- replaces the narrower jobs_by_finish of earlier versions.
DROP INDEX IF EXISTS jobs_by_finish;
CREATE INDEX IF NOT EXISTS jobs_by_finish_id ON jobs (state, finished_ms, id);
-- dead letters grouped by error (admin, stores/sql_error_groups.py): the exception type and
-- the message's first line, each cut to 200 characters, spelled exactly as the admin's statements
-- spell them. Partial: queries must spell state = 'failed' literally.
CREATE INDEX IF NOT EXISTS jobs_error_groups ON jobs (
    substr(COALESCE(exc_type, ''), 1, 200),
    substr(substr(COALESCE(exc_message, ''), 1,
                  instr(COALESCE(exc_message, '') || char(10), char(10)) - 1), 1, 200),
    finished_ms, id) WHERE state = 'failed';
-- the enqueued jobs of one task in the claim index's order (admin: a task's listing and its
-- capped count read the task's range, not every waiting job). Partial: queries must spell
-- state = 'enqueued' literally.
CREATE INDEX IF NOT EXISTS jobs_ready_by_name ON jobs (name, queue, score)
    WHERE state = 'enqueued';
-- the dead letters of one task, newest first (admin: the per-task breakdown's dead-letter
-- count per task, a task's dead-letter listing), written only for dead letters.
CREATE INDEX IF NOT EXISTS jobs_failed_by_name ON jobs (name, finished_ms, id)
    WHERE state = 'failed';
-- blocked jobs of a group, oldest first (unblocking); groups having blocked jobs. Partial:
-- queries must spell state = 'blocked' literally for the planner to use it.
CREATE INDEX IF NOT EXISTS jobs_blocked ON jobs (conc_group, score) WHERE state = 'blocked';

CREATE TABLE IF NOT EXISTS holds (
    lock       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS holds_by_expiry ON holds (expires_ms);

CREATE TABLE IF NOT EXISTS slots (
    conc_group TEXT NOT NULL,
    job_id     TEXT NOT NULL,
    PRIMARY KEY (conc_group, job_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS transient (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    queue      TEXT NOT NULL,
    body       BLOB NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS transient_by_queue ON transient (queue, id);

CREATE TABLE IF NOT EXISTS bindings (
    exchange TEXT NOT NULL,
    binding  TEXT NOT NULL,
    PRIMARY KEY (exchange, binding)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS binding_deadlines (
    exchange   TEXT NOT NULL,
    binding    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (exchange, binding)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS transient_marks (
    queue      TEXT PRIMARY KEY,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- The lease token counter starts above every token already issued (a store of an earlier
-- version counted tokens per job). Read only while the counter is missing: every connection
-- runs this script, and MAX(token) reads the whole table (0.6 s at a million jobs).
INSERT INTO meta (key, value) SELECT 'token', (SELECT COALESCE(MAX(token), 0) FROM jobs)
WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'token');

CREATE TABLE IF NOT EXISTS rate_claims (
    rate_group TEXT NOT NULL,
    started    INTEGER NOT NULL,
    at_ms      INTEGER NOT NULL,
    job_id     TEXT NOT NULL,
    token      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_claims_by_group ON rate_claims (rate_group, started, at_ms);

CREATE TABLE IF NOT EXISTS rate_wake (
    rate_group TEXT PRIMARY KEY,
    at_ms      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS leases (
    role       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS paused_queues (
    queue       TEXT PRIMARY KEY,
    paused_ms   INTEGER NOT NULL
) WITHOUT ROWID;

-- the Celery workers' own records (admin workers page): info is JSON (host, pid, queues,
-- interval_ms); started_ms kept while the pid stays the same.
CREATE TABLE IF NOT EXISTS workers (
    node        TEXT PRIMARY KEY,
    info        TEXT NOT NULL,
    started_ms  INTEGER NOT NULL,
    at_ms       INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS schedules (
    name        TEXT PRIMARY KEY,
    last_due_ms INTEGER NOT NULL,
    next_due_ms INTEGER NOT NULL DEFAULT 0,
    paused      INTEGER NOT NULL DEFAULT 0,
    task        TEXT NOT NULL DEFAULT '',
    schedule    TEXT NOT NULL DEFAULT '',
    last_job    TEXT NOT NULL DEFAULT '',
    fired       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- the admin's queue history (stores/admin_base/queue_history.py): one sample per minute
-- bucket, {"queue": [enqueued jobs, oldest waiting since ms]} as JSON, kept a day.
CREATE TABLE IF NOT EXISTS queue_history (
    bucket_ms   INTEGER PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
    sample      TEXT NOT NULL
);
