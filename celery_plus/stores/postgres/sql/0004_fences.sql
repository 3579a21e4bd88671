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
-- * jobs_token    a trigger: whenever claim() or claim_job() give a job a new token (its
--                 previous token + 1, as in 0001/0003), the token is taken from `tokens` instead.
-- * renew_holds() called by maintenance: holds lapsing within half a backstop whose job still
--                 waits or runs get another backstop.

CREATE SEQUENCE tokens;
SELECT setval('tokens', COALESCE((SELECT max(token) FROM jobs), 0) + 1, false);

CREATE FUNCTION next_token() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    NEW.token := nextval('tokens');
    RETURN NEW;
END
$$;

-- Fires only on the updates that issue a token (a claim), never on the others of a job.
CREATE TRIGGER jobs_token BEFORE UPDATE OF token ON jobs
FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token) EXECUTE FUNCTION next_token();

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
        -- A job its own delivery already finished (an early ack) is published anew.
        IF (COALESCE(v_prev = 'running', false) OR p_continues > 0) AND NOT o_continued
           AND NOT COALESCE(p_continues > 0 AND v_token = p_continues
                            AND v_prev IN ('completed', 'failed', 'canceled', 'discarded'),
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
