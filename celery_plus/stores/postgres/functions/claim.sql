-- Apply `settles` first, then take up to p_max jobs from the queues (in order) for one worker,
-- in one transaction. Rows: ('c', id, token, msg, deliveries, queue) per claim, ('b', id) per
-- parked job, ('d', id, reason in o_queue) per dead letter of the settles, and ('n', NULL,
-- ms until the next scheduled job is due) when one is scheduled.
--
-- Candidates are read with FOR UPDATE SKIP LOCKED: concurrent claimers never wait for, nor
-- get, each other's rows. A group's slots are counted and taken under its advisory lock; once
-- a transaction holds a group lock, further groups are only tried (a busy one is skipped and
-- its job left enqueued), so claimers never deadlock on groups. A job whose rate group's
-- window is full is parked (rate_park) and counts nothing; a claim counts in its group's
-- window; rate groups whose window has room get their parked jobs back first (release_rate).
-- A paused queue (paused_queues, looked at under its shared pause lock: pause_lock()) is
-- skipped: its jobs stay enqueued. p_run_ms: the settles' run times (settle()).
CREATE OR REPLACE FUNCTION claim(p_queues text[], p_worker text, p_max integer,
                                 p_scan_limit integer, p_lease_ms bigint, p_backstop bigint,
                                 p_ids text[], p_tokens bigint[], p_actions text[],
                                 p_details text[], p_run_ms bigint[])
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
    v_due bigint;
    v_lock_key text;
    v_ok boolean;
    v_parked boolean;
    r record;
BEGIN
    IF NOT v_locking THEN
        FOR o_id, o_queue IN SELECT s.o_id, s.o_reason
                             FROM settle(p_ids, p_tokens, p_actions, p_details, p_backstop,
                                         p_run_ms) s
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
        PERFORM pause_lock(v_queue, false);
        CONTINUE WHEN EXISTS (SELECT 1 FROM paused_queues pq WHERE pq.queue = v_queue);
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
                ELSIF COALESCE(r.conc_group, '') <> ''
                        AND NOT take_slot(r.id, r.conc_group, r.conc_limit, true) THEN
                    v_parked := true;
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

-- The form of functions release 6 and earlier (settles without run times), for their workers
-- during a rolling upgrade.
CREATE OR REPLACE FUNCTION claim(p_queues text[], p_worker text, p_max integer,
                                 p_scan_limit integer, p_lease_ms bigint, p_backstop bigint,
                                 p_ids text[], p_tokens bigint[], p_actions text[],
                                 p_details text[])
RETURNS TABLE (o_kind text, o_id text, o_token bigint, o_msg bytea, o_deliveries integer,
               o_queue text)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM claim(p_queues, p_worker, p_max, p_scan_limit, p_lease_ms, p_backstop,
                        p_ids, p_tokens, p_actions, p_details, NULL::bigint[]);
$$;
