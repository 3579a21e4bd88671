-- Take the oldest live message of a transient queue (NULL when none).
CREATE OR REPLACE FUNCTION pop_transient(p_queue text) RETURNS bytea
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_body bytea;
BEGIN
    DELETE FROM transient WHERE id = (
        SELECT t.id FROM transient t WHERE t.queue = p_queue AND t.expires_ms >= now_ms()
        ORDER BY t.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING body INTO v_body;
    RETURN v_body;
END
$$;
