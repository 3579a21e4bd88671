-- The exchange's bindings that have not lapsed.
CREATE OR REPLACE FUNCTION live_bindings(p_exchange text) RETURNS SETOF text
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT b.binding FROM bindings b
    LEFT JOIN binding_deadlines d ON d.exchange = b.exchange AND d.binding = b.binding
    WHERE b.exchange = p_exchange AND (d.expires_ms IS NULL OR d.expires_ms >= now_ms())
    ORDER BY b.binding
$$;
