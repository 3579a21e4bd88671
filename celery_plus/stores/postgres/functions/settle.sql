-- End claims, fenced by (id, token); stale settles change nothing. Actions: ack, fail, reject,
-- requeue, defer (a requeue scheduled after defer_ms(deliveries)), release. Returns the dead-lettered
-- (id, reason) pairs. Rows are locked in id order, then their groups in name order, so
-- concurrent settles never deadlock each other. Details are decoded with safe_jsonb(): a detail
-- that is not JSON is a note, never an error that aborts the batch. p_run_ms: per settle, how
-- long its task ran (NULL: not known): the job's start moves to now - that (mark_start()).
CREATE OR REPLACE FUNCTION settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[],
                       p_backstop bigint, p_run_ms bigint[])
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
    v_mark bigint;
BEGIN
    IF COALESCE(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- Rows are found by id alone: the state is tested as COALESCE(state, '') (state is
    -- NOT NULL), which the planner cannot match to the partial index jobs_leases. With
    -- "state = 'running'" it ANDed a bitmap scan of that index with the ids', and a bitmap
    -- scan reads every entry the claims and settles since the last VACUUM left in it (never
    -- marked dead by such a scan): a drain slowed down as it went (20,000 jobs: 11,000
    -- entries read per settle, twice).
    PERFORM 1 FROM jobs j WHERE j.id = ANY (p_ids) AND COALESCE(j.state, '') = 'running'
    ORDER BY j.id FOR UPDATE;
    PERFORM group_lock(g.conc_group) FROM (
        SELECT DISTINCT j.conc_group FROM jobs j
        WHERE j.id = ANY (p_ids) AND COALESCE(j.state, '') = 'running' AND j.conc_group <> ''
        ORDER BY j.conc_group
    ) g;
    FOR v_i IN 1 .. cardinality(p_ids) LOOP
        v_id := p_ids[v_i];
        SELECT j.unique_lock, j.unique_window, j.deliveries, j.max_deliveries, j.conc_group
        INTO v_lock, v_window, v_dl, v_mdl, v_group
        FROM jobs j
        WHERE j.id = v_id AND COALESCE(j.state, '') = 'running' AND j.token = p_tokens[v_i];
        CONTINUE WHEN NOT FOUND;  -- stale: the claim ended or was taken over
        v_action := p_actions[v_i];
        v_mark := p_run_ms[v_i];  -- NULL when p_run_ms is
        IF v_action = 'ack' THEN
            -- The hot path in one UPDATE: completed, lease dropped (end_claim), the start
            -- mark applied (mark_start()'s rule: one row version, not two), slot freed.
            UPDATE jobs SET state = 'completed', finished_ms = v_now, lease_expires_ms = NULL,
                            started_ms = marked_start(started_ms, start_mark, p_tokens[v_i],
                                                      v_mark, v_now),
                            start_mark = marked_token(start_mark, p_tokens[v_i], v_mark)
            WHERE id = v_id;
            IF v_group <> '' THEN
                PERFORM free_slot(v_group, v_id);
            END IF;
            IF v_lock <> '' THEN
                PERFORM release_hold(v_lock, v_window, v_id, v_now);
            END IF;
            CONTINUE;
        END IF;
        PERFORM mark_start(v_id, p_tokens[v_i], v_mark, v_now);
        v_detail := safe_jsonb(p_details[v_i]);
        PERFORM end_claim(v_id);
        IF v_action = 'release' THEN
            UPDATE jobs SET deliveries = greatest(v_dl - 1, 0) WHERE id = v_id;
            PERFORM requeue(v_id, v_now, p_backstop);
        ELSIF v_action IN ('requeue', 'defer') THEN
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
                v_reason := COALESCE(NULLIF(jtext(v_detail, 'reason'), ''),
                                     CASE v_action WHEN 'defer' THEN 'deferred' ELSE 'requeued' END);
                PERFORM push_history(v_id, attempt_entry(v_id, v_reason, v_detail, v_now));
                IF requeue(v_id, v_now, p_backstop) = 'requeued' AND v_action = 'defer' THEN
                    PERFORM schedule(v_id, v_now + defer_ms(v_dl));
                END IF;
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

-- The form of functions release 6 and earlier (no start marks), for their workers during a
-- rolling upgrade.
CREATE OR REPLACE FUNCTION settle(p_ids text[], p_tokens bigint[], p_actions text[], p_details text[],
                       p_backstop bigint)
RETURNS TABLE (o_id text, o_reason text)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM settle(p_ids, p_tokens, p_actions, p_details, p_backstop, NULL::bigint[]);
$$;
