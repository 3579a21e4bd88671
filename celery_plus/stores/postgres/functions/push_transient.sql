-- Append to a transient queue; the queue's messages expire 300 s after its last push.
CREATE OR REPLACE FUNCTION push_transient(p_queue text, p_body bytea) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_expires bigint := now_ms() + 300000;
BEGIN
    UPDATE transient SET expires_ms = v_expires WHERE queue = p_queue;
    INSERT INTO transient (queue, body, expires_ms) VALUES (p_queue, p_body, v_expires);
    PERFORM pg_notify('plus.' || current_schema(), 't:' || p_queue);
END
$$;
