-- Move the oldest blocked job of `p_group` back to its queue (caller holds the group lock);
-- rate-parked jobs wait for their rate group's window instead.
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
