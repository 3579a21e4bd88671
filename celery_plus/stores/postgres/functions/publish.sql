-- publish(): three overloads, one body. The 17-argument one (last here) is the current one;
-- the 14-argument one (0004) holds the rules; the 13-argument one (0001) stays for processes of
-- versions before 0004 during a rolling upgrade, and is fenced like the others (docs/postgres.md,
-- "The 13-argument publish()").
--
-- The 13-argument form: a publish that carries no lease token (those versions never send one),
-- decided by the 14-argument form with p_continues = 0. Returns (holder, state, continued) as
-- it always did: holder is the other job holding the key (a duplicate: nothing stored), else
-- NULL with state 'enqueued' or 'scheduled'; continued is never true now. A publish the fence
-- refuses (its id is running: only its claim's current token may continue it) raises
-- 'publish of running job ... fenced' instead of storing anything, since these columns cannot
-- say "fenced" (reported as a duplicate, a retry of the running task would be lost quietly).
CREATE OR REPLACE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
                        p_eta bigint, p_lock text, p_window text, p_ttl bigint, p_group text,
                        p_limit integer, p_mdl integer, p_backstop bigint,
                        OUT o_holder text, OUT o_state text, OUT o_continued boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_fenced boolean;
BEGIN
    SELECT p.o_holder, p.o_state, p.o_continued, p.o_fenced
    INTO o_holder, o_state, o_continued, v_fenced
    FROM publish(p_id, p_queue, p_msg, p_name, p_priority, p_eta, p_lock, p_window, p_ttl,
                 p_group, p_limit, p_mdl, p_backstop, 0) p;
    IF v_fenced THEN
        RAISE EXCEPTION 'publish of running job % fenced: it may only be continued with its '
                        'claim''s lease token', p_id
            USING HINT = 'This process runs a celery-plus version older than the lease-token '
                         'fences (migration 0004); upgrade it (docs/postgres.md).';
    END IF;
END
$$;

-- Store one task message as a job, deciding uniqueness atomically. A message whose id is
-- running continues it (retry / Task.replace) only with the running claim's lease token: the
-- running claim is settled and the new message takes its place.
-- Returns (holder, state, continued, fenced): holder is the other job holding the key (a
-- duplicate: nothing stored), or this job's own id with fenced set (nothing stored: a running
-- id without its current lease token, or a stale continuation; state is the job's), else NULL
-- with state 'enqueued' or 'scheduled'.
CREATE OR REPLACE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
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
        -- A job its own delivery already finished (an early ack) is published anew.
        IF (COALESCE(v_prev = 'running', false) OR p_continues > 0) AND NOT o_continued
           AND NOT COALESCE(p_continues > 0 AND v_token = p_continues
                            AND v_prev = ANY (finished_states()),
                            false) THEN
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
            v_holder := take_hold(v_lock, p_id, p_window, p_ttl,
                                  greatest(p_eta, v_now) + p_backstop, v_now);
            IF v_holder IS NOT NULL THEN
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
        v_score := p_priority::bigint * priority_factor() + nextval('seq');
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

-- The current one: 0004's (above), then the job's rate fields (p_rate_group, p_rate_limit,
-- p_rate_window; NULL = none). A job without rate fields, new or replacing one without them,
-- is not written again (no second row version per publish).
CREATE OR REPLACE FUNCTION publish(p_id text, p_queue text, p_msg bytea, p_name text, p_priority integer,
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
        WHERE id = p_id
          AND (p_rate_group <> '' OR rate_group IS NOT NULL OR rate_limit IS NOT NULL
               OR rate_window_ms IS NOT NULL OR rate_parked);
    END IF;
END
$$;
