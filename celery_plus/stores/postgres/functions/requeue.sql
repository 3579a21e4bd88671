-- A running job goes back to waiting; returns 'requeued' or 'coalesced'. The pending window's
-- hold is taken again; if another job took it meanwhile, this one coalesces into it.
CREATE OR REPLACE FUNCTION requeue(p_id text, p_now bigint, p_backstop bigint) RETURNS text
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
