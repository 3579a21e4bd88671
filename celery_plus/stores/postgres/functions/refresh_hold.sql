-- PEXPIRE to the backstop, only if `p_id` holds it.
CREATE OR REPLACE FUNCTION refresh_hold(p_lock text, p_id text, p_now bigint, p_backstop bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holds SET expires_ms = p_now + p_backstop
    WHERE lock = p_lock AND holder = p_id AND expires_ms >= p_now;
END
$$;
