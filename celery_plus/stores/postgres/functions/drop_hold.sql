-- Drop unique hold `p_lock`, only if `p_id` holds it.
CREATE OR REPLACE FUNCTION drop_hold(p_lock text, p_id text, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM holds WHERE lock = p_lock AND holder = p_id AND expires_ms >= p_now;
END
$$;
