-- enqueued | scheduled | blocked -> canceled: out of its queue, the schedule or its group's
-- blocked jobs (a waiting job holds no slot), its non-TTL hold released if it holds it,
-- finished_ms = now; pruned like completed records. Running jobs are not touched. A claim
-- racing the cancel either got the row first (the cancel then sees 'running': a no-op) or
-- skips it (claims read with SKIP LOCKED) and never sees it again.
CREATE OR REPLACE FUNCTION admin_cancel(p_id text)
RETURNS TABLE (o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    r record;
BEGIN
    SELECT j.state, j.unique_lock, j.unique_window, j.deliveries INTO r
    FROM jobs j WHERE j.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_extra := '';
    ELSIF r.state <> ALL (waiting_states()) THEN
        o_outcome := 'noop';
        o_extra := r.state;
    ELSE
        PERFORM release_hold(r.unique_lock, r.unique_window, p_id, v_now);
        PERFORM admin_entry(p_id, r.deliveries, 'admin cancel', v_now);
        UPDATE jobs SET state = 'canceled', finished_ms = v_now WHERE id = p_id;
        o_outcome := 'canceled';
        o_extra := r.state;
    END IF;
    RETURN NEXT;
END
$$;
