-- The task of claim (p_id, p_token) starts now: it counts by its start time from here on,
-- read once the group's lock is held (a start stamped before a wait for the lock would count
-- from earlier than it was recorded, and its window would let the next start in that early).
CREATE OR REPLACE FUNCTION rate_start(p_id text, p_token bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_group text;
    v_window bigint;
    v_now bigint;
BEGIN
    SELECT j.rate_group, j.rate_window_ms INTO v_group, v_window FROM jobs j WHERE j.id = p_id;
    IF v_group IS NULL OR v_group = '' THEN
        RETURN;
    END IF;
    PERFORM group_lock(rate_key(v_group));
    v_now := now_ms();
    DELETE FROM rate_claims WHERE rate_group = v_group AND job_id = p_id AND token = p_token;
    INSERT INTO rate_claims (rate_group, started, at_ms, job_id, token)
    VALUES (v_group, true, v_now, p_id, p_token);
    UPDATE rate_wake SET at_ms = least(at_ms, rate_opens(v_group, v_window, v_now))
    WHERE rate_group = v_group;
END
$$;
