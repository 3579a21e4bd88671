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

-- Hold.TAKE (model/rules.py), the rule over the row operation above: unique hold `p_lock` for
-- `p_id` unless another job holds it: a pending/running `p_window` until `p_until` (the due
-- time + the backstop: rules.hold_deadline), renewing p_id's own; a ttl window for `p_ttl` ms,
-- and only when the key is free (a ttl hold is never extended). Returns the other job holding
-- it (a duplicate: nothing taken), else NULL. A plain read first: a duplicate (the common case)
-- locks nothing, so it never waits for, nor makes wait, a transaction that holds the key.
CREATE OR REPLACE FUNCTION take_hold(p_lock text, p_id text, p_window text, p_ttl bigint,
                          p_until bigint, p_now bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
BEGIN
    v_holder := live_holder(p_lock, p_now);
    IF v_holder IS NULL OR v_holder = p_id THEN
        IF p_window = 'ttl' THEN
            IF v_holder IS NULL AND COALESCE(p_ttl, 0) > 0 THEN
                v_holder := take_hold(p_lock, p_id, p_now + p_ttl, p_now, false);
            END IF;
        ELSE
            v_holder := take_hold(p_lock, p_id, p_until, p_now, true);
        END IF;
    END IF;
    RETURN NULLIF(v_holder, p_id);
END
$$;
