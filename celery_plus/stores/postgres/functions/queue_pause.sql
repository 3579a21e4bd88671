-- Pause (`p_paused`) or resume queue `p_queue`, under its pause lock (pause_lock()); returns
-- the database clock once the lock is held: no claim after that time takes a job of a paused
-- queue. Pausing a paused queue keeps the time it was first paused; resuming wakes the
-- queue's idle workers.
CREATE OR REPLACE FUNCTION queue_pause(p_queue text, p_paused boolean) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint;
BEGIN
    PERFORM pause_lock(p_queue, true);
    v_now := now_ms();
    IF p_paused THEN
        INSERT INTO paused_queues (queue, paused_ms) VALUES (p_queue, v_now)
        ON CONFLICT (queue) DO NOTHING;
    ELSE
        DELETE FROM paused_queues WHERE queue = p_queue;
        IF FOUND THEN
            PERFORM wake(p_queue);
        END IF;
    END IF;
    RETURN v_now;
END
$$;
