-- failed -> enqueued for each id (in order), same task id: deliveries back to 0, the back of
-- its queue at its priority (new seq, enqueued_ms = now), finished_ms cleared, history and
-- last error kept plus an 'admin retry' entry. The unique hold is taken again with the publish
-- rules (pending/running: held by this job with the backstop; ttl: taken for the ttl if free);
-- if ANOTHER job holds the key, nothing changes and the row names the holder.
CREATE OR REPLACE FUNCTION admin_retry(p_ids text[], p_task text, p_queue text, p_older bigint,
                            p_backstop bigint)
RETURNS TABLE (o_id text, o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_id text;
    v_holder text;
    r record;
BEGIN
    FOREACH v_id IN ARRAY COALESCE(p_ids, '{}'::text[]) LOOP
        o_id := v_id;
        SELECT j.state, j.name, j.queue, j.finished_ms, j.unique_lock, j.unique_window,
               j.unique_ttl_ms, j.score, j.deliveries
        INTO r FROM jobs j WHERE j.id = v_id FOR UPDATE;
        IF NOT FOUND THEN
            o_outcome := 'missing';
            o_extra := '';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF r.state <> 'failed' THEN
            o_outcome := 'noop';
            o_extra := r.state;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT admin_in_scope(r.name, r.queue, r.finished_ms, p_task, p_queue, p_older,
                              v_now) THEN
            o_outcome := 'skipped';
            o_extra := r.state;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF r.unique_lock IS NOT NULL AND r.unique_lock <> '' THEN
            v_holder := take_hold(r.unique_lock, v_id, r.unique_window, r.unique_ttl_ms,
                                  v_now + p_backstop, v_now);
            IF v_holder IS NOT NULL THEN
                -- Held by another job (or taken by a publisher just now): nothing changed.
                o_outcome := 'conflict';
                o_extra := v_holder;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        PERFORM admin_entry(v_id, r.deliveries, 'admin retry', v_now);
        UPDATE jobs SET deliveries = 0, enqueued_ms = v_now, finished_ms = NULL,
                        score = (r.score / priority_factor()) * priority_factor()
                                + nextval('seq')
        WHERE id = v_id;
        PERFORM enqueue(v_id);
        o_outcome := 'enqueued';
        o_extra := 'failed';
        RETURN NEXT;
    END LOOP;
END
$$;
