-- Declare `p_queue` transient for `p_ttl_ms`; drops lapsed marks.
CREATE OR REPLACE FUNCTION mark_transient(p_queue text, p_ttl_ms bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    DELETE FROM transient_marks WHERE expires_ms < v_now AND queue <> p_queue;
    INSERT INTO transient_marks (queue, expires_ms) VALUES (p_queue, v_now + greatest(p_ttl_ms, 1))
    ON CONFLICT (queue) DO UPDATE SET expires_ms = EXCLUDED.expires_ms;
END
$$;
