-- Wake the workers waiting on `p_queue` (delivered at commit).
CREATE OR REPLACE FUNCTION wake(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('plus.' || current_schema(), 'q:' || p_queue);
END
$$;
