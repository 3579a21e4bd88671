-- Delete the jobs waiting in a queue (enqueued, blocked, scheduled) and release their non-TTL
-- holds; running jobs stay. Rows another transaction is changing right now are left alone.
CREATE OR REPLACE FUNCTION purge(p_queue text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_count integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'enqueued' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'blocked' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    FOR r IN
        SELECT j.id, j.unique_lock, j.unique_window FROM jobs j
        WHERE j.state = 'scheduled' AND j.queue = p_queue FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM release_hold(r.unique_lock, r.unique_window, r.id, v_now);
        DELETE FROM jobs WHERE id = r.id;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
