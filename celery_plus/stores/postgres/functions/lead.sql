-- Take or renew role lease `p_role` for `p_holder`; true when it holds the role.
CREATE OR REPLACE FUNCTION lead(p_role text, p_holder text, p_ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    INSERT INTO leases AS l (role, holder, expires_ms) VALUES (p_role, p_holder, v_now + p_ttl_ms)
    ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
        WHERE l.holder = excluded.holder OR l.expires_ms < v_now;
    RETURN FOUND;
END
$$;
