-- Take unique hold `p_lock` for `p_id` until `p_expires`: atomically inserts it, replaces an
-- expired one, or (p_refresh) renews one `p_id` holds already. Returns the live holder
-- afterwards: `p_id` when taken, another task id when someone else holds it. Concurrent takers
-- serialize on the primary key, so exactly one of them wins.
CREATE OR REPLACE FUNCTION take_hold(p_lock text, p_id text, p_expires bigint, p_now bigint,
                          p_refresh boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
BEGIN
    INSERT INTO holds AS h (lock, holder, expires_ms) VALUES (p_lock, p_id, p_expires)
    ON CONFLICT (lock) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
        WHERE h.expires_ms < p_now OR (p_refresh AND h.holder = excluded.holder)
    RETURNING h.holder INTO v_holder;
    IF FOUND THEN
        RETURN p_id;
    END IF;
    SELECT h.holder INTO v_holder FROM holds h WHERE h.lock = p_lock;
    RETURN v_holder;
END
$$;
