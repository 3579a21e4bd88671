-- A tick: `stale` unless the entry's last due time is `p_expected`; else the entry advances
-- to `p_due` and, unless paused or `p_publish` is false (a skipped tick), the job is
-- published as publish() would. Returns fired | skipped | paused | stale | missing.
CREATE OR REPLACE FUNCTION fire(p_name text, p_expected bigint, p_due bigint, p_next bigint,
                     p_publish boolean, p_id text, p_queue text, p_msg bytea, p_task text,
                     p_priority integer, p_eta bigint, p_lock text, p_window text, p_ttl bigint,
                     p_group text, p_limit integer, p_mdl integer, p_backstop bigint,
                     p_continues bigint, p_rate_group text, p_rate_limit integer,
                     p_rate_window bigint)
RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_last bigint;
    v_paused boolean;
BEGIN
    SELECT s.last_due_ms, s.paused INTO v_last, v_paused FROM schedules s
    WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_last <> p_expected THEN
        RETURN 'stale';
    END IF;
    UPDATE schedules SET last_due_ms = p_due, next_due_ms = p_next WHERE name = p_name;
    IF v_paused THEN
        RETURN 'paused';
    END IF;
    IF NOT p_publish THEN
        RETURN 'skipped';
    END IF;
    UPDATE schedules SET last_job = p_id, fired = fired + 1 WHERE name = p_name;
    PERFORM publish(p_id, p_queue, p_msg, p_task, p_priority, p_eta, p_lock, p_window, p_ttl,
                    p_group, p_limit, p_mdl, p_backstop, p_continues, p_rate_group,
                    p_rate_limit, p_rate_window);
    RETURN 'fired';
END
$$;
