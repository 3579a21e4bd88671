-- Waiting, scheduled until p_due (the job keeps its score, hence its place in line once due);
-- waiters wake to learn the due time, as after a scheduled publish.
CREATE OR REPLACE FUNCTION schedule(p_id text, p_due bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    UPDATE jobs SET state = 'scheduled', due_ms = p_due, rate_parked = false WHERE id = p_id
    RETURNING queue INTO v_queue;
    IF FOUND THEN
        PERFORM wake(v_queue);
    END IF;
END
$$;
