-- Add a binding (idempotent); p_ttl_ms > 0: it lapses that long from now unless bound again,
-- 0: permanent. Drops the exchange's lapsed bindings first.
CREATE OR REPLACE FUNCTION bind(p_exchange text, p_binding text, p_ttl_ms bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    WITH lapsed AS (
        DELETE FROM binding_deadlines d
        WHERE d.exchange = p_exchange AND d.expires_ms < v_now AND d.binding <> p_binding
        RETURNING d.binding)
    DELETE FROM bindings b USING lapsed l
    WHERE b.exchange = p_exchange AND b.binding = l.binding;
    INSERT INTO bindings (exchange, binding) VALUES (p_exchange, p_binding)
    ON CONFLICT DO NOTHING;
    IF p_ttl_ms > 0 THEN
        INSERT INTO binding_deadlines (exchange, binding, expires_ms)
        VALUES (p_exchange, p_binding, v_now + p_ttl_ms)
        ON CONFLICT (exchange, binding) DO UPDATE SET expires_ms = EXCLUDED.expires_ms;
    ELSE
        DELETE FROM binding_deadlines
        WHERE exchange = p_exchange AND binding = p_binding;
    END IF;
END
$$;
