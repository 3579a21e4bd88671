-- The history entry of the job's current attempt ending with `p_outcome`.
CREATE OR REPLACE FUNCTION attempt_entry(p_id text, p_outcome text, p_detail jsonb, p_now bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_entry jsonb;
BEGIN
    SELECT jsonb_build_object('delivery', j.deliveries, 'worker', COALESCE(j.worker, ''),
                              'started_ms', COALESCE(j.started_ms, 0), 'finished_ms', p_now,
                              'outcome', p_outcome, 'token', COALESCE(j.token, 0))
    INTO v_entry FROM jobs j WHERE j.id = p_id;
    IF p_detail IS NOT NULL AND jsonb_typeof(p_detail) = 'object' THEN
        IF p_detail ? 'exc_type' THEN
            v_entry := v_entry || jsonb_build_object('exc_type', p_detail -> 'exc_type');
        END IF;
        IF p_detail ? 'exc_message' THEN
            v_entry := v_entry || jsonb_build_object('exc_message', p_detail -> 'exc_message');
        END IF;
    END IF;
    RETURN v_entry;
END
$$;
