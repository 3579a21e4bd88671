-- celery-plus durable store on PostgreSQL, migration 0004: fenced continuations, tokens unique
-- per id forever, holds that live as long as their job needs them, keys of any size, settles
-- that no failure detail can abort (issue #11, defects 1, 2, 6, 7, 10, 14).
--
-- * tokens        a sequence: every claim's lease token comes from it, so an id published again
--                 after its record was pruned or purged never gets a token an old delivery
--                 could still carry. It starts above every token already issued.
-- * store_key()   a unique key or concurrency group as stored: itself when at most 512 bytes,
--                 else its first 128 characters and the SHA-256 of the whole (a btree index
--                 entry cannot hold a megabyte; the same text always gives the same key).
-- * publish()     (new signature: + p_continues, OUT o_fenced) a continuation must carry the
--                 running claim's lease token; a publish of a running id without it, or a
--                 continuation whose claim is no longer current, changes nothing (fenced). A
--                 message with another key than its job's releases the old key; a non-TTL hold
--                 is taken until due time + backstop. The 13-argument publish() of 0001 stays
--                 for processes of earlier versions during a rolling upgrade.
-- * settle()      details decoded with safe_jsonb(): a detail that is not JSON is a note,
--                 never an error that aborts the batch.
-- * claim(), claim_job()   tokens from next_token().
-- * renew_holds() called by maintenance: holds lapsing within half a backstop whose job still
--                 waits or runs get another backstop.

CREATE SEQUENCE tokens;
SELECT setval('tokens', COALESCE((SELECT max(token) FROM jobs), 0) + 1, false);

CREATE FUNCTION next_token() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT nextval('tokens')
$$;

CREATE FUNCTION store_key(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_key IS NULL OR octet_length(p_key) <= 512 THEN p_key
                ELSE left(p_key, 128) || ' sha256:'
                     || encode(sha256(convert_to(p_key, 'UTF8')), 'hex') END
$$;

-- A settle's detail as jsonb: NULL for none, a note for text that is not a JSON object.
CREATE FUNCTION safe_jsonb(p_text text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_detail jsonb;
BEGIN
    IF p_text IS NULL OR p_text = '' THEN
        RETURN NULL;
    END IF;
    BEGIN
        v_detail := p_text::jsonb;
    EXCEPTION WHEN others THEN
        v_detail := NULL;
    END;
    IF v_detail IS NULL OR jsonb_typeof(v_detail) <> 'object' THEN
        RETURN jsonb_build_object('exc_message', 'failure details could not be decoded');
    END IF;
    RETURN v_detail;
END
$$;

CREATE FUNCTION renew_holds(p_batch integer, p_backstop bigint, p_waiting boolean)
RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_count integer;
BEGIN
    UPDATE holds SET expires_ms = v_now + p_backstop WHERE lock IN (
        SELECT h.lock FROM holds h JOIN jobs j ON j.id = h.holder AND j.unique_lock = h.lock
        WHERE h.expires_ms >= v_now AND h.expires_ms < v_now + p_backstop / 2
          AND j.unique_window IN ('pending', 'running')
          AND ((j.state = 'running' AND j.unique_window = 'running')
               OR (p_waiting AND j.state IN ('enqueued', 'blocked', 'scheduled')))
        ORDER BY h.expires_ms LIMIT p_batch FOR UPDATE OF h SKIP LOCKED);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- == publish (publish.lua) ===================================================================
-- Returns (holder, state, continued, fenced): holder is the other job holding the key (a
-- duplicate: nothing stored), or this job's own id with fenced set (nothing stored: a running
-- id without its current lease token, or a stale continuation; state is the job's), else NULL
-- with state 'enqueued' or 'scheduled'.
CREATE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
                        p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text,
                        p_limit integer, p_mdl integer, p_backstop bigint, p_continues bigint,
                        OUT o_holder text, OUT o_state text, OUT o_continued boolean,
                        OUT o_fenced boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_lock text := store_key(p_lock);
    v_group text := store_key(p_group);
    v_prev text;
    v_token bigint;
    v_old_lock text;
    v_old_window text;
    v_holder text;
    v_score bigint;
BEGIN
    o_fenced := false;
    LOOP
        SELECT j.state, j.token, j.unique_lock, j.unique_window
        INTO v_prev, v_token, v_old_lock, v_old_window
        FROM jobs j WHERE j.id = p_id FOR UPDATE;
        o_continued := COALESCE(v_prev = 'running' AND p_continues > 0
                                AND v_token = p_continues, false);
        IF (COALESCE(v_prev = 'running', false) OR p_continues > 0) AND NOT o_continued THEN
            o_holder := p_id;
            o_state := COALESCE(v_prev, '');
            o_fenced := true;
            RETURN;
        END IF;
        IF o_continued THEN
            PERFORM end_claim(p_id);
            PERFORM push_history(p_id, attempt_entry(p_id, 'retried', NULL, v_now));
        END IF;
        IF v_lock <> '' THEN
            -- A plain read first: a duplicate (the common case) locks nothing, so it never
            -- waits for, nor makes wait, a transaction that holds the key.
            v_holder := live_holder(v_lock, v_now);
            IF v_holder IS NULL OR v_holder = p_id THEN
                IF p_window = 'ttl' THEN
                    IF v_holder IS NULL THEN
                        v_holder := take_hold(v_lock, p_id, v_now + p_ttl, v_now, false);
                    END IF;
                ELSE
                    v_holder := take_hold(v_lock, p_id, greatest(p_eta, v_now) + p_backstop,
                                          v_now, true);
                END IF;
            END IF;
            IF v_holder <> p_id THEN
                IF o_continued THEN
                    PERFORM release_hold(v_old_lock, v_old_window, p_id, v_now);
                    PERFORM coalesce_job(p_id, v_now);
                END IF;
                PERFORM stat('deduplicated');
                o_holder := v_holder;
                o_state := '';
                RETURN;
            END IF;
        END IF;
        IF COALESCE(v_old_lock, '') <> '' AND v_old_lock <> v_lock THEN
            -- Another key than the job's (Task.replace, retry with other arguments): the
            -- old key is free once the new one is decided.
            PERFORM release_hold(v_old_lock, v_old_window, p_id, v_now);
        END IF;
        v_score := p_priority::bigint * 1099511627776 + nextval('seq');
        o_state := CASE WHEN p_eta > v_now THEN 'scheduled' ELSE 'enqueued' END;
        IF v_prev IS NULL THEN
            IF v_lock = '' AND v_group = '' THEN
                INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries,
                                  enqueued_ms, due_ms)
                VALUES (p_id, p_queue, p_name, p_msg, o_state, v_score, p_mdl, v_now, p_eta)
                ON CONFLICT (id) DO NOTHING;
            ELSE
                INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries,
                                  unique_lock, unique_window, unique_ttl_ms, conc_group,
                                  conc_limit, enqueued_ms, due_ms)
                VALUES (p_id, p_queue, p_name, p_msg, o_state, v_score, p_mdl, v_lock,
                        p_window, p_ttl, v_group, p_limit, v_now, p_eta)
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
                            unique_lock = v_lock, unique_window = p_window,
                            unique_ttl_ms = p_ttl, conc_group = v_group, conc_limit = p_limit,
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

-- == settle (settle.lua): as in 0001, details decoded by safe_jsonb() =====================
CREATE OR REPLACE FUNCTION settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[],
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
        v_detail := safe_jsonb(p_details[v_i]);
        PERFORM end_claim(v_id);
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


-- == claim (claim.lua): as in 0001, tokens from next_token() ================================
CREATE OR REPLACE FUNCTION claim(p_queues text[], p_worker text, p_max integer, p_scan_limit integer,
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
                                token = next_token(),
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

-- == claim_job (claim_job.lua): as in 0003, tokens from next_token() ========================
CREATE OR REPLACE FUNCTION claim_job(p_id text, p_worker text, p_lease_ms bigint, p_backstop bigint,
                          OUT o_outcome text, OUT o_state text, OUT o_token bigint,
                          OUT o_deliveries integer, OUT o_lease_left bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_used bigint;
    r record;
BEGIN
    o_token := 0;
    o_deliveries := 0;
    o_lease_left := 0;
    SELECT j.state, j.conc_group, j.conc_limit, j.unique_lock, j.unique_window, j.deliveries,
           j.lease_expires_ms
    INTO r FROM jobs j WHERE j.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_state := '';
        RETURN;
    END IF;
    o_state := r.state;
    IF r.state = 'running' THEN
        o_outcome := 'held';
        o_deliveries := r.deliveries;
        o_lease_left := greatest(COALESCE(r.lease_expires_ms, v_now) - v_now, 0);
        RETURN;
    END IF;
    IF r.state NOT IN ('enqueued', 'scheduled', 'blocked') THEN
        o_outcome := 'finished';
        RETURN;
    END IF;
    IF r.conc_group IS NOT NULL AND r.conc_group <> '' THEN
        PERFORM group_lock(r.conc_group);
        SELECT count(*) INTO v_used FROM slots s WHERE s.conc_group = r.conc_group;
        IF v_used >= r.conc_limit THEN
            PERFORM stat('blocked');
            o_outcome := 'blocked';
            RETURN;
        END IF;
        INSERT INTO slots (conc_group, job_id) VALUES (r.conc_group, p_id)
        ON CONFLICT DO NOTHING;
    END IF;
    IF r.unique_lock IS NOT NULL AND r.unique_lock <> '' THEN
        IF r.unique_window = 'pending' THEN
            PERFORM drop_hold(r.unique_lock, p_id, v_now);
        ELSIF r.unique_window = 'running' THEN
            PERFORM refresh_hold(r.unique_lock, p_id, v_now, p_backstop);
        END IF;
    END IF;
    UPDATE jobs SET state = 'running', worker = p_worker, started_ms = v_now,
                    deliveries = jobs.deliveries + 1, token = next_token(),
                    lease_expires_ms = v_now + p_lease_ms
    WHERE id = p_id
    RETURNING jobs.token, jobs.deliveries INTO o_token, o_deliveries;
    o_outcome := 'claimed';
    o_state := 'running';
END
$$;
