-- Called by maintenance: holds lapsing within half a backstop whose job still waits
-- (p_waiting) or runs get another backstop; returns how many.
CREATE OR REPLACE FUNCTION renew_holds(p_batch integer, p_backstop bigint, p_waiting boolean)
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
               OR (p_waiting AND j.state = ANY (waiting_states())))
        ORDER BY h.expires_ms LIMIT p_batch FOR UPDATE OF h SKIP LOCKED);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
