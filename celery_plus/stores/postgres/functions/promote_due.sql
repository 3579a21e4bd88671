-- Move due scheduled jobs to their queues (bounded); returns how many.
CREATE OR REPLACE FUNCTION promote_due(p_now bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_queue text;
BEGIN
    FOR v_queue IN
        WITH due AS (
            SELECT j.id FROM jobs j WHERE j.state = 'scheduled' AND j.due_ms <= p_now
            ORDER BY j.due_ms LIMIT p_limit FOR UPDATE SKIP LOCKED
        )
        UPDATE jobs SET state = 'enqueued' FROM due WHERE jobs.id = due.id RETURNING jobs.queue
    LOOP
        v_count := v_count + 1;
        PERFORM wake(v_queue);
    END LOOP;
    RETURN v_count;
END
$$;
