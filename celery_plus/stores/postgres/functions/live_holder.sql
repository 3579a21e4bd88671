-- The task id holding unique key `p_lock` now (NULL when none).
CREATE OR REPLACE FUNCTION live_holder(p_lock text, p_now bigint) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RETURN (SELECT h.holder FROM holds h WHERE h.lock = p_lock AND h.expires_ms >= p_now);
END
$$;
