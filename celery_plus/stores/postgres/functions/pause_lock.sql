-- The pause lock of queue `p_queue`, held until the transaction ends: shared by claim()
-- before it looks at the queue, exclusive by queue_pause(). So a pause waits for the claims
-- in flight to commit, and a claim that starts after it sees it. (Keyed apart from the
-- groups' locks, which use the two-key form.)
CREATE OR REPLACE FUNCTION pause_lock(p_queue text, p_exclusive boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_key bigint := hashtextextended('celery_plus.pause:' || current_schema() || ':' || p_queue, 0);
BEGIN
    IF p_exclusive THEN
        PERFORM pg_advisory_xact_lock(v_key);
    ELSE
        PERFORM pg_advisory_xact_lock_shared(v_key);
    END IF;
END
$$;
