-- celery-plus durable store on PostgreSQL, migration 0006: cluster rate limits, role leases
-- and periodic schedule entries (issue #16; docs/rate-limits.md, docs/schedules.md).
--
-- jobs          + rate_group [rg] rate_limit [rl] rate_window_ms [rw]: the job's cluster rate
--                 limit (NULL = none); + rate_parked: true while it is blocked because its
--                 rate group's window was full (Redis P:rblk:{group}), false otherwise.
-- rate_claims   the claims counting in each rate group's window (Redis P:rate:{group} and
--               P:ratep:{group}): started (at_ms: its task's start) or not started yet
--               (at_ms: its claim's first lease deadline); counted and taken under the
--               group's advisory lock (rate_key), as slots are.
-- rate_wake     rate groups with parked jobs, by when their window next has room (P:rwake).
-- leases        role leases (Redis P:lead:{role}): beat's leader.
-- schedules     periodic schedule entries (Redis P:beat:{name}).
--
-- * publish()   (new signature: + p_rate_group, p_rate_limit, p_rate_window) the publish of
--               0004, then the job's rate fields. The 14-argument publish() stays for
--               processes of earlier versions during a rolling upgrade.
-- * claim()     a job whose rate group's window is full is parked (rate_park) and counts
--               nothing; a claim counts in its group's window; rate groups whose window has
--               room get their parked jobs back first (release_rate). Otherwise as in 0001.
-- * enqueue()   also clears rate_parked; unblock_one() (a freed slot) skips rate-parked jobs.
-- * fire()      a schedule entry's fence, advance and its tick's publish, one call.
--
-- (Schema only: the functions named above are in ../functions/, in their current version.)

ALTER TABLE jobs ADD COLUMN rate_group text, ADD COLUMN rate_limit integer,
    ADD COLUMN rate_window_ms bigint, ADD COLUMN rate_parked boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_rate_parked ON jobs (rate_group, score)
    WHERE state = 'blocked' AND rate_parked;

CREATE TABLE rate_claims (
    rate_group text NOT NULL,
    started    boolean NOT NULL,
    at_ms      bigint NOT NULL,
    job_id     text NOT NULL,
    token      bigint NOT NULL
);
CREATE INDEX rate_claims_by_group ON rate_claims (rate_group, started, at_ms);

CREATE TABLE rate_wake (
    rate_group text PRIMARY KEY,
    at_ms      bigint NOT NULL
);
CREATE INDEX rate_wake_by_time ON rate_wake (at_ms);

CREATE TABLE leases (
    role       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_ms bigint NOT NULL
);

CREATE TABLE schedules (
    name        text PRIMARY KEY,
    last_due_ms bigint NOT NULL,
    next_due_ms bigint NOT NULL DEFAULT 0,
    paused      boolean NOT NULL DEFAULT false,
    task        text NOT NULL DEFAULT '',
    schedule    text NOT NULL DEFAULT '',
    last_job    text NOT NULL DEFAULT '',
    fired       bigint NOT NULL DEFAULT 0
);
