-- An admin entry of the job's history (the delivery counter as it is now).
CREATE OR REPLACE FUNCTION admin_entry(p_id text, p_deliveries integer, p_outcome text, p_now bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM push_history(p_id, jsonb_build_object(
        'delivery', COALESCE(p_deliveries, 0), 'worker', '', 'started_ms', p_now,
        'finished_ms', p_now, 'outcome', p_outcome));
END
$$;
