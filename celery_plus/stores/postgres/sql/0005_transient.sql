-- celery-plus durable store on PostgreSQL, migration 0005: bindings that lapse, transient marks.
--
-- binding_deadlines  when a transient queue's binding lapses unless bound again (Redis
--                    P:bindttl:{exchange}); a binding without a row here is permanent.
-- transient_marks    queues declared transient (not durable, auto-delete or exclusive), so a
--                    publisher that never declared one (a worker answering an rpc:// client)
--                    does not store its messages as jobs (Redis P:tmark:{queue}).
-- Lapsed rows are skipped by reads and deleted by the next bind on the exchange / next mark.
-- (Numbered 0005: 0004 is the fenced-continuation migration; they touch different objects.)

CREATE TABLE binding_deadlines (
    exchange   text NOT NULL,
    binding    text NOT NULL,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (exchange, binding)
);

CREATE TABLE transient_marks (
    queue      text PRIMARY KEY,
    expires_ms bigint NOT NULL
);

-- Add a binding (idempotent); p_ttl_ms > 0: it lapses that long from now unless bound again,
-- 0: permanent. Drops the exchange's lapsed bindings first.
CREATE FUNCTION bind(p_exchange text, p_binding text, p_ttl_ms bigint) RETURNS void
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

CREATE FUNCTION unbind(p_exchange text, p_binding text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM bindings WHERE exchange = p_exchange AND binding = p_binding;
    DELETE FROM binding_deadlines WHERE exchange = p_exchange AND binding = p_binding;
END
$$;

-- The exchange's bindings that have not lapsed.
CREATE FUNCTION live_bindings(p_exchange text) RETURNS SETOF text
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT b.binding FROM bindings b
    LEFT JOIN binding_deadlines d ON d.exchange = b.exchange AND d.binding = b.binding
    WHERE b.exchange = p_exchange AND (d.expires_ms IS NULL OR d.expires_ms >= now_ms())
    ORDER BY b.binding
$$;

CREATE FUNCTION mark_transient(p_queue text, p_ttl_ms bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    DELETE FROM transient_marks WHERE expires_ms < v_now AND queue <> p_queue;
    INSERT INTO transient_marks (queue, expires_ms) VALUES (p_queue, v_now + greatest(p_ttl_ms, 1))
    ON CONFLICT (queue) DO UPDATE SET expires_ms = EXCLUDED.expires_ms;
END
$$;
