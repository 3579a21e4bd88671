-- celery-plus durable store on PostgreSQL, migration 0001: tables and indexes.
--
-- Migrations hold the schema only; every function lives once, in its current version, in
-- ../functions/<name>.sql, applied after the migrations whenever its content changes
-- (migrations.py). A migration must not call those functions: on a new store they do not
-- exist yet when it runs.
--
-- Run by migrations.py inside one transaction with `search_path` set to the store's schema
-- (the `plus_pg_schema` setting): names here are unqualified, and every function pins that
-- schema with `SET search_path FROM CURRENT`, so it also works when called (qualified) on a
-- caller's own connection (transactional enqueue).
--
-- Same records and state machine as the Redis store (lua/lib.lua) and the SQLite store
-- (stores/sqlite/schema.sql): one row per job whose `state` column stands for Redis's per-state sorted
-- sets; a partial index per waiting state is each of them, so claim, promotion and recovery
-- cost stays flat however many completed / failed rows are retained. Each state change is ONE
-- function call (one transaction, one round trip), like one Lua script. Times are ms since
-- the epoch from the DATABASE clock (clock_timestamp()), so hosts never disagree.
--
-- jobs        one record per task id (field names of lua/lib.lua in [brackets])
--   id              task id
--   queue [q]       queue name                      name [name]  task name
--   msg [msg]       kombu envelope bytes, delivered exactly as stored
--   state [st]      enqueued|scheduled|blocked|running|completed|failed|canceled|discarded
--   score [score]   order in its queue: priority * priority_factor() + seq (lower first); blocked
--                   jobs keep it (functions/rules.sql, rendered from model/rules.py)
--   token [tok]     lease token, +1 per claim (fences heartbeats and settles); NULL until claimed
--   deliveries [dl] deliveries of the current message   max_deliveries [mdl]  limit (0 = none)
--   unique_lock [uk] unique_window [uw] unique_ttl_ms [ut]   unique key, pending|running|ttl, ttl
--   conc_group [cg] conc_limit [cl]   concurrency group ('' = none), slot limit
--                   (NULL for a job first published with neither a unique key nor a group)
--   due_ms [due] enqueued_ms [enq] started_ms [start] finished_ms [fin]   timestamps
--   worker [wk]     worker holding (or that last held) the claim
--   lease_expires_ms  lease deadline while running (Redis P:lease), NULL otherwise
--   reason [reason] exc_type [etype] exc_message [emsg] traceback [tb]   dead-letter details
--   history [hist]  JSON array of attempts (at most history_max())
-- holds       unique holds (Redis P:u:{lock}); the primary key makes `INSERT ... ON CONFLICT`
--             decide between concurrent publishers on any host: one wins, the others see it.
--   lock, holder    unique key, task id holding it
--   expires_ms      the hold counts as absent once expires_ms < now (ttl window or backstop)
-- slots       concurrency slots taken (Redis P:slot:{group}); a group's slots are counted and
--             taken under a transaction-scoped advisory lock of the group (group_lock), so
--             concurrent claimers can never oversubscribe it.
-- transient   remote-control / reply / event messages (Redis P:t:{queue} lists)
-- bindings    fanout / topic bindings (Redis P:bind:{exchange})
-- stats       counter increments, one row each (no row is ever contended; maintain() folds
--             them): deduplicated, recovered, dead_lettered, blocked
-- meta        'maint' (ms until which maintenance is taken), 'group_cursor' (text: where the
--             unblock sweep goes on)
-- seq         FIFO tie-break (a sequence: never a point of contention)
--
-- Wake-ups: every change that makes work available calls pg_notify('plus.<schema>', 'q:<queue>')
-- (or 't:<queue>' for transient messages); the notification is delivered when the transaction
-- commits, so a rolled-back enqueue wakes nobody.

CREATE SEQUENCE seq;

CREATE TABLE jobs (
    id               text PRIMARY KEY,
    queue            text NOT NULL,
    name             text NOT NULL DEFAULT '',
    msg              bytea NOT NULL,
    state            text NOT NULL,
    score            bigint NOT NULL,
    token            bigint,
    deliveries       integer NOT NULL DEFAULT 0,
    max_deliveries   integer NOT NULL DEFAULT 0,
    unique_lock      text,
    unique_window    text,
    unique_ttl_ms    bigint,
    conc_group       text,
    conc_limit       integer,
    due_ms           bigint NOT NULL DEFAULT 0,
    enqueued_ms      bigint NOT NULL,
    started_ms       bigint,
    finished_ms      bigint,
    worker           text,
    lease_expires_ms bigint,
    reason           text,
    exc_type         text,
    exc_message      text,
    traceback        text,
    history          jsonb
);

-- Partial indexes: each holds only the rows of one waiting state, so they stay small while
-- finished rows pile up. Queries must spell the state literally for the planner to use them.
CREATE INDEX jobs_ready ON jobs (queue, score) WHERE state = 'enqueued';
CREATE INDEX jobs_scheduled ON jobs (due_ms) WHERE state = 'scheduled';
CREATE INDEX jobs_leases ON jobs (lease_expires_ms) WHERE state = 'running';
CREATE INDEX jobs_blocked ON jobs (conc_group, score) WHERE state = 'blocked';
CREATE INDEX jobs_finished ON jobs (state, finished_ms, id)
    WHERE state IN ('completed', 'failed', 'canceled', 'discarded');

CREATE TABLE holds (
    lock       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX holds_by_expiry ON holds (expires_ms);

CREATE TABLE slots (
    conc_group text NOT NULL,
    job_id     text NOT NULL,
    PRIMARY KEY (conc_group, job_id)
);

CREATE TABLE transient (
    id         bigserial PRIMARY KEY,
    queue      text NOT NULL,
    body       bytea NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX transient_by_queue ON transient (queue, id);
CREATE INDEX transient_by_expiry ON transient (expires_ms);

CREATE TABLE bindings (
    exchange text NOT NULL,
    binding  text NOT NULL,
    PRIMARY KEY (exchange, binding)
);

CREATE TABLE stats (
    name text NOT NULL,
    n    bigint NOT NULL
);

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value bigint NOT NULL DEFAULT 0,
    note  text NOT NULL DEFAULT ''
);
INSERT INTO meta (key, value) VALUES ('maint', 0), ('group_cursor', 0);
