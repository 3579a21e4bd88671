-- Back to (or into) its queue; the job keeps its score, hence its place in line;
-- it is no longer rate-parked.
CREATE OR REPLACE FUNCTION enqueue(p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    UPDATE jobs SET state = 'enqueued', rate_parked = false WHERE id = p_id
    RETURNING queue INTO v_queue;
    IF FOUND THEN
        PERFORM wake(v_queue);
    END IF;
END
$$;
