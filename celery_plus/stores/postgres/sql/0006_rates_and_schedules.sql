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

-- == rate limit helpers (lua/lib.lua's rate_*) ==============================================

-- The advisory lock key of a rate group (apart from the concurrency groups' keys).
CREATE FUNCTION rate_key(p_group text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'rate|' || p_group $$;

-- Room left in the group's window: the limit minus its starts of the last `p_window` ms and
-- its claims not started yet (lapsed ones dropped). Caller holds the group's lock.
CREATE FUNCTION rate_room(p_group text, p_limit integer, p_window bigint, p_now bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rate_claims WHERE rate_group = p_group
        AND ((started AND at_ms < p_now - p_window) OR (NOT started AND at_ms < p_now));
    RETURN p_limit - (SELECT count(*) FROM rate_claims WHERE rate_group = p_group);
END
$$;

-- When the group's window next has room: its oldest start leaves it, or its oldest claim
-- not started yet lapses.
CREATE FUNCTION rate_opens(p_group text, p_window bigint, p_now bigint) RETURNS bigint
LANGUAGE sql AS $$
    SELECT COALESCE(min(CASE WHEN started THEN at_ms + p_window + 1 ELSE at_ms END), p_now)
    FROM rate_claims WHERE rate_group = p_group
$$;

-- The task of claim (p_id, p_token) starts now: it counts by its start time from here on.
CREATE FUNCTION rate_start(p_id text, p_token bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_group text;
    v_window bigint;
    v_now bigint := now_ms();
BEGIN
    SELECT j.rate_group, j.rate_window_ms INTO v_group, v_window FROM jobs j WHERE j.id = p_id;
    IF v_group IS NULL OR v_group = '' THEN
        RETURN;
    END IF;
    PERFORM group_lock(rate_key(v_group));
    DELETE FROM rate_claims WHERE rate_group = v_group AND job_id = p_id AND token = p_token;
    INSERT INTO rate_claims (rate_group, started, at_ms, job_id, token)
    VALUES (v_group, true, v_now, p_id, p_token);
    UPDATE rate_wake SET at_ms = least(at_ms, rate_opens(v_group, v_window, v_now))
    WHERE rate_group = v_group;
END
$$;

CREATE FUNCTION rate_park(p_id text, p_group text, p_window bigint, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = 'blocked', rate_parked = true WHERE id = p_id;
    PERFORM stat('rate_limited');
    INSERT INTO rate_wake AS w (rate_group, at_ms)
    VALUES (p_group, rate_opens(p_group, p_window, p_now))
    ON CONFLICT (rate_group) DO UPDATE SET at_ms = least(w.at_ms, excluded.at_ms);
END
$$;

-- Groups whose window has room (at most `p_groups`, each not busy in another transaction)
-- get that many parked jobs back, oldest first, keeping their place in line.
CREATE FUNCTION release_rate(p_now bigint, p_groups integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_group text;
    v_limit integer;
    v_window bigint;
    v_room bigint;
    v_opens bigint;
    v_id text;
    v_released integer := 0;
BEGIN
    FOR v_group IN
        SELECT w.rate_group FROM rate_wake w WHERE w.at_ms <= p_now ORDER BY w.at_ms
        LIMIT p_groups FOR UPDATE SKIP LOCKED
    LOOP
        CONTINUE WHEN NOT group_try_lock(rate_key(v_group));
        SELECT j.rate_limit, j.rate_window_ms INTO v_limit, v_window FROM jobs j
        WHERE j.state = 'blocked' AND j.rate_parked AND j.rate_group = v_group
        ORDER BY j.score LIMIT 1;
        IF NOT FOUND THEN
            DELETE FROM rate_wake WHERE rate_group = v_group;
            CONTINUE;
        END IF;
        v_room := rate_room(v_group, v_limit, v_window, p_now);
        IF v_room > 0 THEN
            FOR v_id IN
                SELECT j.id FROM jobs j
                WHERE j.state = 'blocked' AND j.rate_parked AND j.rate_group = v_group
                ORDER BY j.score LIMIT v_room FOR UPDATE SKIP LOCKED
            LOOP
                PERFORM enqueue(v_id);
                v_released := v_released + 1;
            END LOOP;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'blocked' AND j.rate_parked
                       AND j.rate_group = v_group) THEN
            DELETE FROM rate_wake WHERE rate_group = v_group;
        ELSE
            -- (an empty window: the jobs given back are not claimed yet; look again in a
            -- second)
            v_opens := rate_opens(v_group, v_window, p_now);
            UPDATE rate_wake SET at_ms = CASE WHEN v_opens > p_now THEN v_opens
                                              ELSE p_now + 1000 END
            WHERE rate_group = v_group;
        END IF;
    END LOOP;
    RETURN v_released;
END
$$;

-- Maintenance: every rate group with parked jobs is looked at again (a wake-up lost to
-- nothing else), then released as by a claim.
CREATE FUNCTION maintain_rates(p_batch integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    INSERT INTO rate_wake (rate_group, at_ms)
    SELECT DISTINCT j.rate_group, v_now FROM jobs j
    WHERE j.state = 'blocked' AND j.rate_parked LIMIT 50
    ON CONFLICT DO NOTHING;
    RETURN release_rate(v_now, p_batch);
END
$$;

CREATE OR REPLACE FUNCTION enqueue(p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    UPDATE jobs SET state = 'enqueued', rate_parked = false WHERE id = p_id
    RETURNING queue INTO v_queue;
    IF FOUND THEN
        PERFORM wake(v_queue);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION unblock_one(p_group text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
BEGIN
    SELECT j.id INTO v_id FROM jobs j
    WHERE j.state = 'blocked' AND j.conc_group = p_group AND NOT j.rate_parked
    ORDER BY j.score LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM enqueue(v_id);
    RETURN true;
END
$$;

-- == publish with a rate limit ==============================================================
CREATE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
                        p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text,
                        p_limit integer, p_mdl integer, p_backstop bigint, p_continues bigint,
                        p_rate_group text, p_rate_limit integer, p_rate_window bigint,
                        OUT o_holder text, OUT o_state text, OUT o_continued boolean,
                        OUT o_fenced boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    SELECT p.o_holder, p.o_state, p.o_continued, p.o_fenced
    INTO o_holder, o_state, o_continued, o_fenced
    FROM publish(p_id, p_queue, p_msg, p_name, p_priority, p_eta, p_lock, p_window, p_ttl,
                 p_group, p_limit, p_mdl, p_backstop, p_continues) p;
    IF o_holder IS NULL AND NOT o_fenced THEN
        UPDATE jobs SET rate_group = store_key(NULLIF(p_rate_group, '')),
                        rate_limit = CASE WHEN p_rate_group <> '' THEN p_rate_limit END,
                        rate_window_ms = CASE WHEN p_rate_group <> '' THEN p_rate_window END,
                        rate_parked = false
        WHERE id = p_id;
    END IF;
END
$$;

-- == claim (claim.lua) ======================================================================
CREATE OR REPLACE FUNCTION claim(p_queues text[], p_worker text, p_max integer,
                                 p_scan_limit integer, p_lease_ms bigint, p_backstop bigint,
                                 p_ids text[], p_tokens bigint[], p_actions text[],
                                 p_details text[])
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
    v_lock_key text;
    v_ok boolean;
    v_parked boolean;
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
    PERFORM release_rate(v_now, 20);
    FOREACH v_queue IN ARRAY p_queues LOOP
        WHILE v_taken < p_max AND v_scanned < p_scan_limit LOOP
            v_got := 0;
            FOR r IN
                SELECT j.id, j.conc_group, j.conc_limit, j.unique_lock, j.unique_window,
                       j.rate_group, j.rate_limit, j.rate_window_ms
                FROM jobs j
                WHERE j.state = 'enqueued' AND j.queue = v_queue AND j.id <> ALL (v_skipped)
                ORDER BY j.score LIMIT p_max - v_taken
                FOR UPDATE SKIP LOCKED
            LOOP
                v_got := v_got + 1;
                v_scanned := v_scanned + 1;
                -- The group locks this job needs (rate group, then concurrency group): the
                -- first of a claim with no settles may wait, every other is tried, and a
                -- busy one leaves the job for another claim.
                v_ok := true;
                FOREACH v_lock_key IN ARRAY ARRAY[
                        CASE WHEN r.rate_group <> '' THEN rate_key(r.rate_group) END,
                        NULLIF(r.conc_group, '')] LOOP
                    CONTINUE WHEN v_lock_key IS NULL OR v_lock_key = ANY (v_held);
                    IF v_locking AND cardinality(v_held) = 0 THEN
                        PERFORM group_lock(v_lock_key);
                    ELSIF NOT group_try_lock(v_lock_key) THEN
                        v_ok := false;
                        EXIT;
                    END IF;
                    v_held := v_held || v_lock_key;
                END LOOP;
                IF NOT v_ok THEN
                    v_skipped := v_skipped || r.id;
                    CONTINUE;
                END IF;
                -- Parked (its rate group's window is full, or its concurrency group): it
                -- keeps its score, so it keeps its place in line.
                v_parked := false;
                IF r.rate_group IS NOT NULL AND r.rate_group <> '' AND
                        rate_room(r.rate_group, r.rate_limit, r.rate_window_ms, v_now) <= 0 THEN
                    PERFORM rate_park(r.id, r.rate_group, r.rate_window_ms, v_now);
                    v_parked := true;
                ELSIF r.conc_group IS NOT NULL AND r.conc_group <> '' THEN
                    SELECT count(*) INTO v_used FROM slots s WHERE s.conc_group = r.conc_group;
                    IF v_used >= r.conc_limit THEN
                        UPDATE jobs SET state = 'blocked', rate_parked = false WHERE id = r.id;
                        PERFORM stat('blocked');
                        v_parked := true;
                    ELSE
                        INSERT INTO slots (conc_group, job_id) VALUES (r.conc_group, r.id)
                        ON CONFLICT DO NOTHING;
                    END IF;
                END IF;
                IF v_parked THEN
                    o_kind := 'b';
                    o_id := r.id;
                    o_token := NULL;
                    o_msg := NULL;
                    o_deliveries := NULL;
                    o_queue := v_queue;
                    RETURN NEXT;
                    CONTINUE;
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
                IF r.rate_group IS NOT NULL AND r.rate_group <> '' THEN
                    INSERT INTO rate_claims (rate_group, started, at_ms, job_id, token)
                    VALUES (r.rate_group, false, v_now + p_lease_ms, r.id, o_token);
                END IF;
                o_kind := 'c';
                o_id := r.id;
                o_queue := v_queue;
                RETURN NEXT;
                v_taken := v_taken + 1;
            END LOOP;
            EXIT WHEN v_got = 0;
        END LOOP;
    END LOOP;
    SELECT least((SELECT min(j.due_ms) FROM jobs j WHERE j.state = 'scheduled'),
                 (SELECT min(w.at_ms) FROM rate_wake w)) INTO v_due;
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

-- == role leases and schedules (lua/lead.lua, lua/fire.lua) ================================
CREATE FUNCTION lead(p_role text, p_holder text, p_ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    INSERT INTO leases AS l (role, holder, expires_ms) VALUES (p_role, p_holder, v_now + p_ttl_ms)
    ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
        WHERE l.holder = excluded.holder OR l.expires_ms < v_now;
    RETURN FOUND;
END
$$;

-- A tick: `stale` unless the entry's last due time is `p_expected`; else the entry advances
-- to `p_due` and, unless paused or `p_publish` is false (a skipped tick), the job is
-- published as publish() would. Returns fired | skipped | paused | stale | missing.
CREATE FUNCTION fire(p_name text, p_expected bigint, p_due bigint, p_next bigint,
                     p_publish boolean, p_id text, p_queue text, p_msg bytea, p_task text,
                     p_priority integer, p_eta bigint, p_lock text, p_window text, p_ttl bigint,
                     p_group text, p_limit integer, p_mdl integer, p_backstop bigint,
                     p_continues bigint, p_rate_group text, p_rate_limit integer,
                     p_rate_window bigint)
RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_last bigint;
    v_paused boolean;
BEGIN
    SELECT s.last_due_ms, s.paused INTO v_last, v_paused FROM schedules s
    WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_last <> p_expected THEN
        RETURN 'stale';
    END IF;
    UPDATE schedules SET last_due_ms = p_due, next_due_ms = p_next WHERE name = p_name;
    IF v_paused THEN
        RETURN 'paused';
    END IF;
    IF NOT p_publish THEN
        RETURN 'skipped';
    END IF;
    UPDATE schedules SET last_job = p_id, fired = fired + 1 WHERE name = p_name;
    PERFORM publish(p_id, p_queue, p_msg, p_task, p_priority, p_eta, p_lock, p_window, p_ttl,
                    p_group, p_limit, p_mdl, p_backstop, p_continues, p_rate_group,
                    p_rate_limit, p_rate_window);
    RETURN 'fired';
END
$$;
