-- Is a job (task name, queue, finish time) in a bulk operation's scope? NULL = any.
CREATE OR REPLACE FUNCTION admin_in_scope(p_name text, p_queue text, p_finished bigint, p_task text,
                               p_scope_queue text, p_older bigint, p_now bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (p_task IS NULL OR p_name = p_task)
       AND (p_scope_queue IS NULL OR p_queue = p_scope_queue)
       AND (p_older IS NULL OR COALESCE(p_finished, 0) <= p_now - p_older)
$$;
