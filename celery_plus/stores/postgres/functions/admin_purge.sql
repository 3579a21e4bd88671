-- Delete the records of `p_ids` still in `p_state` (a finished state) and in the scope;
-- returns the ids deleted, in order.
CREATE OR REPLACE FUNCTION admin_purge(p_state text, p_ids text[], p_task text, p_queue text,
                            p_older bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_id text;
    r record;
BEGIN
    IF p_state <> ALL (finished_states()) THEN
        RAISE EXCEPTION 'admin_purge: % is not a finished state', p_state;
    END IF;
    FOREACH v_id IN ARRAY COALESCE(p_ids, '{}'::text[]) LOOP
        SELECT j.state, j.name, j.queue, j.finished_ms INTO r
        FROM jobs j WHERE j.id = v_id FOR UPDATE;
        CONTINUE WHEN NOT FOUND OR r.state <> p_state;
        CONTINUE WHEN NOT admin_in_scope(r.name, r.queue, r.finished_ms, p_task, p_queue,
                                         p_older, v_now);
        DELETE FROM jobs WHERE id = v_id;
        RETURN NEXT v_id;
    END LOOP;
END
$$;
