-- Dead-letter a job (any state): release its hold, keep the message, record why.
CREATE OR REPLACE FUNCTION dead_letter(p_id text, p_detail jsonb, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_lock text;
    v_window text;
    v_reason text := COALESCE(NULLIF(jtext(p_detail, 'reason'), ''), 'task failed');
BEGIN
    SELECT j.unique_lock, j.unique_window INTO v_lock, v_window FROM jobs j WHERE j.id = p_id;
    PERFORM release_hold(v_lock, v_window, p_id, p_now);
    PERFORM push_history(p_id, attempt_entry(p_id, v_reason, p_detail, p_now));
    UPDATE jobs SET state = 'failed', finished_ms = p_now, reason = v_reason,
                    exc_type = jtext(p_detail, 'exc_type'),
                    exc_message = jtext(p_detail, 'exc_message'),
                    traceback = jtext(p_detail, 'traceback')
    WHERE id = p_id;
    PERFORM stat('dead_lettered');
END
$$;
