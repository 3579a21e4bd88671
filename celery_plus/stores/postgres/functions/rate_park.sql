-- Park a job whose rate group's window is full until the window has room (rate_wake).
CREATE OR REPLACE FUNCTION rate_park(p_id text, p_group text, p_window bigint, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = 'blocked', rate_parked = true WHERE id = p_id;
    PERFORM stat('rate_limited');
    INSERT INTO rate_wake AS w (rate_group, at_ms)
    VALUES (p_group, rate_opens(p_group, p_window, p_now))
    ON CONFLICT (rate_group) DO UPDATE SET at_ms = least(w.at_ms, excluded.at_ms);
END
$$;
