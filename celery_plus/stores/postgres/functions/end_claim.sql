-- Leave the running state: drop the lease, free the slot. Caller checked the fence.
CREATE OR REPLACE FUNCTION end_claim(p_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_group text;
BEGIN
    UPDATE jobs SET lease_expires_ms = NULL WHERE id = p_id RETURNING conc_group INTO v_group;
    PERFORM free_slot(v_group, p_id);
END
$$;
