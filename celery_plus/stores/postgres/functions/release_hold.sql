-- Release a non-TTL unique hold, but only if `p_id` holds it.
CREATE OR REPLACE FUNCTION release_hold(p_lock text, p_window text, p_id text, p_now bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_lock IS NOT NULL AND p_lock <> '' AND p_window IS DISTINCT FROM 'ttl' THEN
        PERFORM drop_hold(p_lock, p_id, p_now);
    END IF;
END
$$;
