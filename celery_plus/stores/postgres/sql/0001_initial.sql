-- celery-plus durable store on PostgreSQL, migration 0001: tables, indexes, functions.
--
-- Run by pg_migrations.py inside one transaction with `search_path` set to the store's schema
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
--   score [score]   order in its queue: priority * 2^40 + seq (lower first); blocked jobs keep it
--   token [tok]     lease token, +1 per claim (fences heartbeats and settles); NULL until claimed
--   deliveries [dl] deliveries of the current message   max_deliveries [mdl]  limit (0 = none)
--   unique_lock [uk] unique_window [uw] unique_ttl_ms [ut]   unique key, pending|running|ttl, ttl
--   conc_group [cg] conc_limit [cl]   concurrency group ('' = none), slot limit
--                   (NULL for a job first published with neither a unique key nor a group)
--   due_ms [due] enqueued_ms [enq] started_ms [start] finished_ms [fin]   timestamps
--   worker [wk]     worker holding (or that last held) the claim
--   lease_expires_ms  lease deadline while running (Redis P:lease), NULL otherwise
--   reason [reason] exc_type [etype] exc_message [emsg] traceback [tb]   dead-letter details
--   history [hist]  JSON array of attempts (at most 50)
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

-- == helpers (lua/lib.lua) ===================================================================

CREATE FUNCTION now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

CREATE FUNCTION stat(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stats (name, n) VALUES (p_name, 1);
END
$$;

-- A detail value as Redis stores it with HSET ('' for absent / null / false).
CREATE FUNCTION jtext(p_detail jsonb, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_detail IS NULL OR jsonb_typeof(p_detail) <> 'object' THEN ''
        WHEN NOT (p_detail ? p_key) THEN ''
        WHEN jsonb_typeof(p_detail -> p_key) = 'null' THEN ''
        WHEN p_detail -> p_key = 'false'::jsonb THEN ''
        ELSE p_detail ->> p_key
    END
$$;

CREATE FUNCTION wake(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('plus.' || current_schema(), 'q:' || p_queue);
END
$$;

-- The advisory lock of a concurrency group, held until the transaction ends.
CREATE FUNCTION group_lock(p_group text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema()), hashtext(p_group));
END
$$;

CREATE FUNCTION group_try_lock(p_group text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN pg_try_advisory_xact_lock(hashtext(current_schema()), hashtext(p_group));
END
$$;

CREATE FUNCTION live_holder(p_lock text, p_now bigint) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RETURN (SELECT h.holder FROM holds h WHERE h.lock = p_lock AND h.expires_ms >= p_now);
END
$$;

-- Take unique hold `p_lock` for `p_id` until `p_expires`: atomically inserts it, replaces an
-- expired one, or (p_refresh) renews one `p_id` holds already. Returns the live holder
-- afterwards: `p_id` when taken, another task id when someone else holds it. Concurrent takers
-- serialize on the primary key, so exactly one of them wins.
CREATE FUNCTION take_hold(p_lock text, p_id text, p_expires bigint, p_now bigint,
                          p_refresh boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
BEGIN
    INSERT INTO holds AS h (lock, holder, expires_ms) VALUES (p_lock, p_id, p_expires)
    ON CONFLICT (lock) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
        WHERE h.expires_ms < p_now OR (p_refresh AND h.holder = excluded.holder)
    RETURNING h.holder INTO v_holder;
    IF FOUND THEN
        RETURN p_id;
    END IF;
    SELECT h.holder INTO v_holder FROM holds h WHERE h.lock = p_lock;
    RETURN v_holder;
END
$$;

-- PEXPIRE to the backstop, only if `p_id` holds it.
CREATE FUNCTION refresh_hold(p_lock text, p_id text, p_now bigint, p_backstop bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holds SET expires_ms = p_now + p_backstop
    WHERE lock = p_lock AND holder = p_id AND expires_ms >= p_now;
END
$$;

CREATE FUNCTION drop_hold(p_lock text, p_id text, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM holds WHERE lock = p_lock AND holder = p_id AND expires_ms >= p_now;
END
$$;

-- Release a non-TTL unique hold, but only if `p_id` holds it.
CREATE FUNCTION release_hold(p_lock text, p_window text, p_id text, p_now bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_lock IS NOT NULL AND p_lock <> '' AND p_window IS DISTINCT FROM 'ttl' THEN
        PERFORM drop_hold(p_lock, p_id, p_now);
    END IF;
END
$$;

-- Back to (or into) its queue; the job keeps its score, hence its place in line.
CREATE FUNCTION enqueue(p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    UPDATE jobs SET state = 'enqueued' WHERE id = p_id RETURNING queue INTO v_queue;
    IF FOUND THEN
        PERFORM wake(v_queue);
    END IF;
END
$$;

-- Move the oldest blocked job of `p_group` back to its queue (caller holds the group lock).
CREATE FUNCTION unblock_one(p_group text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
BEGIN
    SELECT j.id INTO v_id FROM jobs j WHERE j.state = 'blocked' AND j.conc_group = p_group
    ORDER BY j.score LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM enqueue(v_id);
    RETURN true;
END
$$;

CREATE FUNCTION free_slot(p_group text, p_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_group IS NULL OR p_group = '' THEN
        RETURN;
    END IF;
    PERFORM group_lock(p_group);
    DELETE FROM slots WHERE conc_group = p_group AND job_id = p_id;
    IF FOUND THEN
        PERFORM unblock_one(p_group);
    END IF;
END
$$;

-- Leave the running state: drop the lease, free the slot. Caller checked the fence.
CREATE FUNCTION end_claim(p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_group text;
BEGIN
    UPDATE jobs SET lease_expires_ms = NULL WHERE id = p_id RETURNING conc_group INTO v_group;
    PERFORM free_slot(v_group, p_id);
END
$$;

CREATE FUNCTION push_history(p_id text, p_entry jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_hist jsonb;
BEGIN
    SELECT j.history INTO v_hist FROM jobs j WHERE j.id = p_id;
    IF v_hist IS NULL OR jsonb_typeof(v_hist) <> 'array' THEN
        v_hist := '[]'::jsonb;
    END IF;
    v_hist := v_hist || jsonb_build_array(p_entry);
    IF jsonb_array_length(v_hist) > 50 THEN
        SELECT jsonb_agg(e.value ORDER BY e.ordinality) INTO v_hist
        FROM jsonb_array_elements(v_hist) WITH ORDINALITY AS e
        WHERE e.ordinality > jsonb_array_length(v_hist) - 50;
    END IF;
    UPDATE jobs SET history = v_hist WHERE id = p_id;
END
$$;

CREATE FUNCTION attempt_entry(p_id text, p_outcome text, p_detail jsonb, p_now bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_entry jsonb;
BEGIN
    SELECT jsonb_build_object('delivery', j.deliveries, 'worker', COALESCE(j.worker, ''),
                              'started_ms', COALESCE(j.started_ms, 0), 'finished_ms', p_now,
                              'outcome', p_outcome)
    INTO v_entry FROM jobs j WHERE j.id = p_id;
    IF p_detail IS NOT NULL AND jsonb_typeof(p_detail) = 'object' THEN
        IF p_detail ? 'exc_type' THEN
            v_entry := v_entry || jsonb_build_object('exc_type', p_detail -> 'exc_type');
        END IF;
        IF p_detail ? 'exc_message' THEN
            v_entry := v_entry || jsonb_build_object('exc_message', p_detail -> 'exc_message');
        END IF;
    END IF;
    RETURN v_entry;
END
$$;

-- Dead-letter a job (any state): release its hold, keep the message, record why.
CREATE FUNCTION dead_letter(p_id text, p_detail jsonb, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_lock text;
    v_window text;
    v_reason text := COALESCE(NULLIF(jtext(p_detail, 'reason'), ''), 'task failed');
BEGIN
    SELECT j.unique_lock, j.unique_window INTO v_lock, v_window FROM jobs j WHERE j.id = p_id;
    PERFORM release_hold(v_lock, v_window, p_id, p_now);
    PERFORM push_history(p_id, attempt_entry(p_id, v_reason, p_detail, p_now));
    UPDATE jobs SET state = 'failed', finished_ms = p_now, reason = v_reason,
                    exc_type = jtext(p_detail, 'exc_type'),
                    exc_message = jtext(p_detail, 'exc_message'),
                    traceback = jtext(p_detail, 'traceback')
    WHERE id = p_id;
    PERFORM stat('dead_lettered');
END
$$;

CREATE FUNCTION coalesce_job(p_id text, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = 'completed', finished_ms = p_now, reason = 'coalesced'
    WHERE id = p_id;
    PERFORM stat('deduplicated');
END
$$;

-- A running job goes back to waiting; returns 'requeued' or 'coalesced'. The pending window's
-- hold is taken again; if another job took it meanwhile, this one coalesces into it.
CREATE FUNCTION requeue(p_id text, p_now bigint, p_backstop bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_lock text;
    v_window text;
BEGIN
    SELECT j.unique_lock, j.unique_window INTO v_lock, v_window FROM jobs j WHERE j.id = p_id;
    IF v_lock IS NOT NULL AND v_lock <> '' THEN
        IF v_window = 'pending' THEN
            IF take_hold(v_lock, p_id, p_now + p_backstop, p_now, true) <> p_id THEN
                PERFORM coalesce_job(p_id, p_now);
                RETURN 'coalesced';
            END IF;
        ELSIF v_window = 'running' THEN
            PERFORM refresh_hold(v_lock, p_id, p_now, p_backstop);
        END IF;
    END IF;
    PERFORM enqueue(p_id);
    RETURN 'requeued';
END
$$;

-- Move due scheduled jobs to their queues (bounded); returns how many.
CREATE FUNCTION promote_due(p_now bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_queue text;
BEGIN
    FOR v_queue IN
        WITH due AS (
            SELECT j.id FROM jobs j WHERE j.state = 'scheduled' AND j.due_ms <= p_now
            ORDER BY j.due_ms LIMIT p_limit FOR UPDATE SKIP LOCKED
        )
        UPDATE jobs SET state = 'enqueued' FROM due WHERE jobs.id = due.id RETURNING jobs.queue
    LOOP
        v_count := v_count + 1;
        PERFORM wake(v_queue);
    END LOOP;
    RETURN v_count;
END
$$;

-- == publish (publish.lua) ===================================================================
-- Store one task message as a job, deciding uniqueness atomically. Returns (holder, state,
-- continued): holder is the other job holding the key (a duplicate: nothing stored), else
-- NULL with state 'enqueued' or 'scheduled'. A message whose id is running is a continuation
-- (retry / Task.replace): the running claim is settled and the new message takes its place.
CREATE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
                        p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text,
                        p_limit integer, p_mdl integer, p_backstop bigint,
                        OUT o_holder text, OUT o_state text, OUT o_continued boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_prev text;
    v_holder text;
    v_score bigint;
BEGIN
    LOOP
        SELECT j.state INTO v_prev FROM jobs j WHERE j.id = p_id FOR UPDATE;
        o_continued := COALESCE(v_prev = 'running', false);
        IF o_continued THEN
            PERFORM end_claim(p_id);
            PERFORM push_history(p_id, attempt_entry(p_id, 'retried', NULL, v_now));
        END IF;
        IF p_lock <> '' THEN
            -- A plain read first: a duplicate (the common case) locks nothing, so it never
            -- waits for, nor makes wait, a transaction that holds the key.
            v_holder := live_holder(p_lock, v_now);
            IF v_holder IS NULL OR v_holder = p_id THEN
                IF p_window = 'ttl' THEN
                    IF v_holder IS NULL THEN
                        v_holder := take_hold(p_lock, p_id, v_now + p_ttl, v_now, false);
                    END IF;
                ELSE
                    v_holder := take_hold(p_lock, p_id, v_now + p_backstop, v_now, true);
                END IF;
            END IF;
            IF v_holder <> p_id THEN
                IF o_continued THEN
                    PERFORM coalesce_job(p_id, v_now);
                END IF;
                PERFORM stat('deduplicated');
                o_holder := v_holder;
                o_state := '';
                RETURN;
            END IF;
        END IF;
        v_score := p_priority::bigint * 1099511627776 + nextval('seq');
        o_state := CASE WHEN p_eta > v_now THEN 'scheduled' ELSE 'enqueued' END;
        IF v_prev IS NULL THEN
            IF p_lock = '' AND p_group = '' THEN
                INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries,
                                  enqueued_ms, due_ms)
                VALUES (p_id, p_queue, p_name, p_msg, o_state, v_score, p_mdl, v_now, p_eta)
                ON CONFLICT (id) DO NOTHING;
            ELSE
                INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries,
                                  unique_lock, unique_window, unique_ttl_ms, conc_group,
                                  conc_limit, enqueued_ms, due_ms)
                VALUES (p_id, p_queue, p_name, p_msg, o_state, v_score, p_mdl, p_lock,
                        p_window, p_ttl, p_group, p_limit, v_now, p_eta)
                ON CONFLICT (id) DO NOTHING;
            END IF;
            IF NOT FOUND THEN
                -- The same id was published concurrently and committed first: publish again,
                -- now as a replacement of that job.
                CONTINUE;
            END IF;
        ELSE
            -- Same task id again: the new message replaces the job's previous one. A
            -- continuation keeps its claim's details; a replacement starts afresh.
            UPDATE jobs SET queue = p_queue, name = p_name, msg = p_msg, state = o_state,
                            score = v_score, deliveries = 0, max_deliveries = p_mdl,
                            unique_lock = p_lock, unique_window = p_window,
                            unique_ttl_ms = p_ttl, conc_group = p_group, conc_limit = p_limit,
                            enqueued_ms = v_now, due_ms = p_eta, lease_expires_ms = NULL,
                            reason = CASE WHEN o_continued THEN reason END,
                            exc_type = CASE WHEN o_continued THEN exc_type END,
                            exc_message = CASE WHEN o_continued THEN exc_message END,
                            traceback = CASE WHEN o_continued THEN traceback END,
                            started_ms = CASE WHEN o_continued THEN started_ms END,
                            finished_ms = CASE WHEN o_continued THEN finished_ms END,
                            worker = CASE WHEN o_continued THEN worker END
            WHERE id = p_id;
        END IF;
        -- A scheduled job wakes waiters too: they learn its due time and sleep until then.
        PERFORM wake(p_queue);
        RETURN;
    END LOOP;
END
$$;

-- == settle (settle.lua) =====================================================================
-- End claims, fenced by (id, token); stale settles change nothing. Returns the dead-lettered
-- (id, reason) pairs. Rows are locked in id order, then their groups in name order, so
-- concurrent settles never deadlock each other.
CREATE FUNCTION settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[],
                       p_backstop bigint)
RETURNS TABLE (o_id text, o_reason text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_i integer;
    v_id text;
    v_action text;
    v_detail jsonb;
    v_lock text;
    v_window text;
    v_dl integer;
    v_mdl integer;
    v_group text;
    v_reason text;
BEGIN
    IF COALESCE(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM jobs j WHERE j.id = ANY (p_ids) AND j.state = 'running'
    ORDER BY j.id FOR UPDATE;
    PERFORM group_lock(g.conc_group) FROM (
        SELECT DISTINCT j.conc_group FROM jobs j
        WHERE j.id = ANY (p_ids) AND j.state = 'running' AND j.conc_group <> ''
        ORDER BY j.conc_group
    ) g;
    FOR v_i IN 1 .. cardinality(p_ids) LOOP
        v_id := p_ids[v_i];
        SELECT j.unique_lock, j.unique_window, j.deliveries, j.max_deliveries, j.conc_group
        INTO v_lock, v_window, v_dl, v_mdl, v_group
        FROM jobs j WHERE j.id = v_id AND j.state = 'running' AND j.token = p_tokens[v_i];
        CONTINUE WHEN NOT FOUND;  -- stale: the claim ended or was taken over
        v_action := p_actions[v_i];
        IF v_action = 'ack' THEN
            -- The hot path in one UPDATE: completed, lease dropped (end_claim), slot freed.
            UPDATE jobs SET state = 'completed', finished_ms = v_now, lease_expires_ms = NULL
            WHERE id = v_id;
            IF v_group <> '' THEN
                PERFORM free_slot(v_group, v_id);
            END IF;
            IF v_lock <> '' THEN
                PERFORM release_hold(v_lock, v_window, v_id, v_now);
            END IF;
            CONTINUE;
        END IF;
        PERFORM end_claim(v_id);
        v_detail := CASE WHEN COALESCE(p_details[v_i], '') = '' THEN NULL
                         ELSE p_details[v_i]::jsonb END;
        IF v_action = 'release' THEN
            UPDATE jobs SET deliveries = greatest(v_dl - 1, 0) WHERE id = v_id;
            PERFORM requeue(v_id, v_now, p_backstop);
        ELSIF v_action = 'requeue' THEN
            IF v_mdl > 0 AND v_dl >= v_mdl THEN
                v_detail := COALESCE(v_detail, '{}'::jsonb)
                            || jsonb_build_object('reason', 'delivery limit');
                IF jtext(v_detail, 'exc_message') = '' THEN
                    v_detail := v_detail || jsonb_build_object(
                        'exc_message',
                        'message delivered ' || v_dl || ' times without being settled');
                END IF;
                PERFORM dead_letter(v_id, v_detail, v_now);
                o_id := v_id;
                o_reason := 'delivery limit';
                RETURN NEXT;
            ELSE
                v_reason := COALESCE(NULLIF(jtext(v_detail, 'reason'), ''), 'requeued');
                PERFORM push_history(v_id, attempt_entry(v_id, v_reason, v_detail, v_now));
                PERFORM requeue(v_id, v_now, p_backstop);
            END IF;
        ELSE  -- fail, reject
            v_detail := COALESCE(v_detail, '{}'::jsonb);
            IF v_action = 'reject' AND jtext(v_detail, 'reason') = '' THEN
                v_detail := v_detail || jsonb_build_object('reason', 'rejected');
            END IF;
            PERFORM dead_letter(v_id, v_detail, v_now);
            o_id := v_id;
            o_reason := COALESCE(NULLIF(jtext(v_detail, 'reason'), ''), 'task failed');
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

-- == claim (claim.lua) =======================================================================
-- Apply `settles` first, then take up to p_max jobs from the queues (in order) for one worker,
-- in one transaction. Rows: ('c', id, token, msg, deliveries, queue) per claim, ('b', id) per
-- parked job, ('d', id, reason in o_queue) per dead letter of the settles, and ('n', NULL,
-- ms until the next scheduled job is due) when one is scheduled.
--
-- Candidates are read with FOR UPDATE SKIP LOCKED: concurrent claimers never wait for, nor
-- get, each other's rows. A group's slots are counted and taken under its advisory lock; once
-- a transaction holds a group lock, further groups are only tried (a busy one is skipped and
-- its job left enqueued), so claimers never deadlock on groups.
CREATE FUNCTION claim(p_queues text[], p_worker text, p_max integer, p_scan_limit integer,
                      p_lease_ms bigint, p_backstop bigint, p_ids text[], p_tokens bigint[],
                      p_actions text[], p_details text[])
RETURNS TABLE (o_kind text, o_id text, o_token bigint, o_msg bytea, o_deliveries integer,
               o_queue text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint;
    v_taken integer := 0;
    v_scanned integer := 0;
    v_got integer;
    v_queue text;
    v_held text[] := '{}';
    v_skipped text[] := '{}';
    v_locking boolean := COALESCE(cardinality(p_ids), 0) = 0;
    v_used bigint;
    v_due bigint;
    r record;
BEGIN
    IF NOT v_locking THEN
        FOR o_id, o_queue IN SELECT s.o_id, s.o_reason
                             FROM settle(p_ids, p_tokens, p_actions, p_details, p_backstop) s
        LOOP
            o_kind := 'd';
            RETURN NEXT;
        END LOOP;
        o_id := NULL;
        o_queue := NULL;
    END IF;
    v_now := now_ms();
    PERFORM promote_due(v_now, 100);
    FOREACH v_queue IN ARRAY p_queues LOOP
        WHILE v_taken < p_max AND v_scanned < p_scan_limit LOOP
            v_got := 0;
            FOR r IN
                SELECT j.id, j.conc_group, j.conc_limit, j.unique_lock, j.unique_window
                FROM jobs j
                WHERE j.state = 'enqueued' AND j.queue = v_queue AND j.id <> ALL (v_skipped)
                ORDER BY j.score LIMIT p_max - v_taken
                FOR UPDATE SKIP LOCKED
            LOOP
                v_got := v_got + 1;
                v_scanned := v_scanned + 1;
                IF r.conc_group IS NOT NULL AND r.conc_group <> '' THEN
                    IF NOT (r.conc_group = ANY (v_held)) THEN
                        IF v_locking AND cardinality(v_held) = 0 THEN
                            PERFORM group_lock(r.conc_group);
                        ELSIF NOT group_try_lock(r.conc_group) THEN
                            v_skipped := v_skipped || r.id;
                            CONTINUE;
                        END IF;
                        v_held := v_held || r.conc_group;
                    END IF;
                    SELECT count(*) INTO v_used FROM slots s WHERE s.conc_group = r.conc_group;
                    IF v_used >= r.conc_limit THEN
                        -- Parked: keeps its score, so it keeps its place in line.
                        UPDATE jobs SET state = 'blocked' WHERE id = r.id;
                        PERFORM stat('blocked');
                        o_kind := 'b';
                        o_id := r.id;
                        o_token := NULL;
                        o_msg := NULL;
                        o_deliveries := NULL;
                        o_queue := v_queue;
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                    INSERT INTO slots (conc_group, job_id) VALUES (r.conc_group, r.id)
                    ON CONFLICT DO NOTHING;
                END IF;
                IF r.unique_lock IS NOT NULL AND r.unique_lock <> '' THEN
                    IF r.unique_window = 'pending' THEN
                        PERFORM drop_hold(r.unique_lock, r.id, v_now);
                    ELSIF r.unique_window = 'running' THEN
                        PERFORM refresh_hold(r.unique_lock, r.id, v_now, p_backstop);
                    END IF;
                END IF;
                UPDATE jobs SET state = 'running', worker = p_worker, started_ms = v_now,
                                deliveries = jobs.deliveries + 1,
                                token = COALESCE(jobs.token, 0) + 1,
                                lease_expires_ms = v_now + p_lease_ms
                WHERE id = r.id
                RETURNING jobs.token, jobs.msg, jobs.deliveries
                INTO o_token, o_msg, o_deliveries;
                o_kind := 'c';
                o_id := r.id;
                o_queue := v_queue;
                RETURN NEXT;
                v_taken := v_taken + 1;
            END LOOP;
            EXIT WHEN v_got = 0;
        END LOOP;
    END LOOP;
    SELECT min(j.due_ms) INTO v_due FROM jobs j WHERE j.state = 'scheduled';
    IF v_due IS NOT NULL THEN
        o_kind := 'n';
        o_id := NULL;
        o_token := greatest(v_due - v_now, 0);
        o_msg := NULL;
        o_deliveries := NULL;
        o_queue := NULL;
        RETURN NEXT;
    END IF;
END
$$;

-- == heartbeat (heartbeat.lua) ===============================================================
-- Renew the leases of claims still current; returns the ids whose claim was lost, in order.
CREATE FUNCTION heartbeat(p_ids text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    PERFORM 1 FROM jobs j WHERE j.id = ANY (p_ids) ORDER BY j.id FOR UPDATE;
    RETURN QUERY
    WITH renewed AS (
        UPDATE jobs SET lease_expires_ms = v_now + p_lease_ms
        FROM unnest(p_ids, p_tokens) AS h(id, token)
        WHERE jobs.id = h.id AND jobs.state = 'running' AND jobs.token = h.token
        RETURNING jobs.id
    )
    SELECT h.id FROM unnest(p_ids) WITH ORDINALITY AS h(id, n)
    WHERE h.id NOT IN (SELECT renewed.id FROM renewed)
    ORDER BY h.n;
END
$$;

-- == recover (recover.lua) ===================================================================
-- Return claims whose STORED lease deadline passed: back to enqueued, or dead-lettered once
-- their deliveries reach the limit. Rows: (id, requeued|coalesced|dead).
CREATE FUNCTION recover(p_limit integer, p_backstop bigint)
RETURNS TABLE (o_id text, o_outcome text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_ids text[];
    r record;
BEGIN
    SELECT array_agg(e.id ORDER BY e.lease_expires_ms) INTO v_ids FROM (
        SELECT j.id, j.lease_expires_ms FROM jobs j
        WHERE j.state = 'running' AND j.lease_expires_ms <= v_now
        ORDER BY j.lease_expires_ms LIMIT p_limit FOR UPDATE SKIP LOCKED
    ) e;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    PERFORM group_lock(g.conc_group) FROM (
        SELECT DISTINCT j.conc_group FROM jobs j
        WHERE j.id = ANY (v_ids) AND j.conc_group <> '' ORDER BY j.conc_group
    ) g;
    FOR r IN SELECT j.id, j.deliveries, j.max_deliveries, j.worker
             FROM unnest(v_ids) WITH ORDINALITY AS e(id, n) JOIN jobs j ON j.id = e.id
             ORDER BY e.n
    LOOP
        PERFORM end_claim(r.id);
        PERFORM stat('recovered');
        o_id := r.id;
        IF r.max_deliveries > 0 AND r.deliveries >= r.max_deliveries THEN
            PERFORM dead_letter(r.id, jsonb_build_object(
                'reason', 'delivery limit',
                'exc_message', 'message delivered ' || r.deliveries
                               || ' times; last lease expired'), v_now);
            o_outcome := 'dead';
        ELSE
            PERFORM push_history(r.id, attempt_entry(r.id, 'lease expired', jsonb_build_object(
                'exc_message',
                'lease expired (claimed by ' || COALESCE(r.worker, '?') || ')'), v_now));
            o_outcome := requeue(r.id, v_now, p_backstop);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- == maintain (maintain.lua) =================================================================
-- Bounded housekeeping: promote due jobs, drop stale slot entries and unblock groups with
-- free slots (50 groups a pass, going on where the last pass stopped), prune finished
-- records past retention, drop expired holds and transient messages, fold counters.
-- Runs when the maintenance interval passed — for the elected leader (p_leader); for any
-- other worker only once the leader missed two intervals (a leader alive but stuck).
-- Returns (ran, promoted, unblocked, pruned).
CREATE FUNCTION prune(p_state text, p_before bigint, p_max_count bigint, p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_pruned integer;
    v_more integer;
    v_excess bigint;
BEGIN
    -- The state is spelled as a literal so the planner uses the partial index jobs_finished.
    EXECUTE format(
        'DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = %L '
        'AND finished_ms <= $1 ORDER BY finished_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED)',
        p_state) USING p_before, p_batch;
    GET DIAGNOSTICS v_pruned = ROW_COUNT;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM jobs WHERE state = %L LIMIT $1) t',
                   p_state) INTO v_excess USING p_max_count + p_batch;
    v_excess := v_excess - p_max_count;
    IF v_excess > 0 THEN
        EXECUTE format(
            'DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = %L '
            'ORDER BY finished_ms, id LIMIT $1 FOR UPDATE SKIP LOCKED)', p_state)
        USING least(v_excess, p_batch);
        GET DIAGNOSTICS v_more = ROW_COUNT;
        v_pruned := v_pruned + v_more;
    END IF;
    RETURN v_pruned;
END
$$;

CREATE FUNCTION maintain(p_leader boolean, p_interval_ms bigint, p_batch integer,
                         p_comp_ret bigint, p_comp_max bigint, p_dead_ret bigint,
                         p_dead_max bigint,
                         OUT o_ran boolean, OUT o_promoted integer, OUT o_unblocked integer,
                         OUT o_pruned integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_until bigint;
    v_cursor text;
    v_start text;
    v_group text;
    v_groups text[] := '{}';
    v_limit integer;
    v_free bigint;
    v_wrapped boolean := false;
BEGIN
    o_promoted := 0;
    o_unblocked := 0;
    o_pruned := 0;
    SELECT m.value INTO v_until FROM meta m WHERE m.key = 'maint' FOR UPDATE;
    IF v_until >= v_now OR (NOT p_leader AND v_until + 2 * p_interval_ms >= v_now) THEN
        o_ran := false;
        RETURN;
    END IF;
    UPDATE meta SET value = v_now + p_interval_ms WHERE key = 'maint';
    o_ran := true;
    o_promoted := promote_due(v_now, p_batch);

    -- Groups having blocked jobs, from the cursor on (wrapping around once).
    SELECT m.note INTO v_start FROM meta m WHERE m.key = 'group_cursor' FOR UPDATE;
    v_cursor := v_start;
    WHILE cardinality(v_groups) < 50 LOOP
        SELECT min(j.conc_group) INTO v_group FROM jobs j
        WHERE j.state = 'blocked' AND j.conc_group > v_cursor;
        IF v_group IS NULL OR (v_wrapped AND v_group > v_start) THEN
            EXIT WHEN v_wrapped OR v_start = '';
            v_wrapped := true;
            v_cursor := '';
            CONTINUE;
        END IF;
        EXIT WHEN v_group = ANY (v_groups);
        v_groups := v_groups || v_group;
        v_cursor := v_group;
    END LOOP;
    UPDATE meta SET note = CASE WHEN cardinality(v_groups) >= 50 THEN v_groups[50] ELSE '' END
    WHERE key = 'group_cursor';
    FOREACH v_group IN ARRAY v_groups LOOP
        -- A busy group is being settled or claimed right now: leave it to that transaction.
        CONTINUE WHEN NOT group_try_lock(v_group);
        -- Slot entries whose job is no longer running are stale.
        DELETE FROM slots s WHERE s.conc_group = v_group AND NOT EXISTS (
            SELECT 1 FROM jobs j WHERE j.id = s.job_id AND j.state = 'running');
        SELECT j.conc_limit INTO v_limit FROM jobs j
        WHERE j.state = 'blocked' AND j.conc_group = v_group ORDER BY j.score LIMIT 1;
        v_free := COALESCE(v_limit, 0)
                  - (SELECT count(*) FROM slots s WHERE s.conc_group = v_group);
        WHILE v_free > 0 LOOP
            EXIT WHEN NOT unblock_one(v_group);
            v_free := v_free - 1;
            o_unblocked := o_unblocked + 1;
        END LOOP;
    END LOOP;

    o_pruned := prune('completed', v_now - p_comp_ret, p_comp_max, p_batch)
                + prune('failed', v_now - p_dead_ret, p_dead_max, p_batch)
                + prune('canceled', v_now - p_comp_ret, p_comp_max, p_batch);
    -- Expired holds and transient messages are absent already; drop their rows.
    DELETE FROM holds WHERE lock IN (
        SELECT h.lock FROM holds h WHERE h.expires_ms < v_now
        ORDER BY h.expires_ms LIMIT p_batch FOR UPDATE SKIP LOCKED);
    DELETE FROM transient WHERE id IN (
        SELECT t.id FROM transient t WHERE t.expires_ms < v_now
        ORDER BY t.expires_ms LIMIT p_batch FOR UPDATE SKIP LOCKED);
    -- Fold the counter increments into one row per name.
    WITH folded AS (DELETE FROM stats RETURNING name, n)
    INSERT INTO stats (name, n) SELECT f.name, sum(f.n) FROM folded f GROUP BY f.name;
END
$$;

-- == purge (purge.lua) =======================================================================
-- Delete the jobs waiting in a queue (enqueued, blocked, scheduled) and release their non-TTL
-- holds; running jobs stay. Rows another transaction is changing right now are left alone.
CREATE FUNCTION purge(p_queue text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_count integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'enqueued' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'blocked' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'scheduled' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;

-- == transient messages (remote control, replies, events) ===================================
-- Append to a transient queue; the queue's messages expire 300 s after its last push.
CREATE FUNCTION push_transient(p_queue text, p_body bytea) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_expires bigint := now_ms() + 300000;
BEGIN
    UPDATE transient SET expires_ms = v_expires WHERE queue = p_queue;
    INSERT INTO transient (queue, body, expires_ms) VALUES (p_queue, p_body, v_expires);
    PERFORM pg_notify('plus.' || current_schema(), 't:' || p_queue);
END
$$;

CREATE FUNCTION pop_transient(p_queue text) RETURNS bytea
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_body bytea;
BEGIN
    DELETE FROM transient WHERE id = (
        SELECT t.id FROM transient t WHERE t.queue = p_queue AND t.expires_ms >= now_ms()
        ORDER BY t.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING body INTO v_body;
    RETURN v_body;
END
$$;
