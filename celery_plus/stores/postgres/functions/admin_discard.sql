-- failed -> discarded; the record is kept (finished_ms = now) and pruned like completed ones.
CREATE OR REPLACE FUNCTION admin_discard(p_id text)
RETURNS TABLE (o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_state text;
    v_deliveries integer;
BEGIN
    SELECT j.state, j.deliveries INTO v_state, v_deliveries FROM jobs j WHERE j.id = p_id
    FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_extra := '';
    ELSIF v_state <> 'failed' THEN
        o_outcome := 'noop';
        o_extra := v_state;
    ELSE
        PERFORM admin_entry(p_id, v_deliveries, 'admin discard', v_now);
        UPDATE jobs SET state = 'discarded', finished_ms = v_now WHERE id = p_id;
        o_outcome := 'discarded';
        o_extra := 'failed';
    END IF;
    RETURN NEXT;
END
$$;
