-- Return claims whose STORED lease deadline passed: back to enqueued, or dead-lettered once
-- their deliveries reach the limit. Rows: (id, requeued|coalesced|dead).
CREATE OR REPLACE FUNCTION recover(p_limit integer, p_backstop bigint)
RETURNS TABLE (o_id text, o_outcome text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_ids text[];
    r record;
BEGIN
    SELECT array_agg(e.id ORDER BY e.lease_expires_ms) INTO v_ids FROM (
        SELECT j.id, j.lease_expires_ms FROM jobs j
        WHERE j.state = 'running' AND j.lease_expires_ms <= v_now
        ORDER BY j.lease_expires_ms LIMIT p_limit FOR UPDATE SKIP LOCKED
    ) e;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    PERFORM group_lock(g.conc_group) FROM (
        SELECT DISTINCT j.conc_group FROM jobs j
        WHERE j.id = ANY (v_ids) AND j.conc_group <> '' ORDER BY j.conc_group
    ) g;
    FOR r IN SELECT j.id, j.deliveries, j.max_deliveries, j.worker
             FROM unnest(v_ids) WITH ORDINALITY AS e(id, n) JOIN jobs j ON j.id = e.id
             ORDER BY e.n
    LOOP
        PERFORM end_claim(r.id);
        PERFORM stat('recovered');
        o_id := r.id;
        IF r.max_deliveries > 0 AND r.deliveries >= r.max_deliveries THEN
            PERFORM dead_letter(r.id, jsonb_build_object(
                'reason', 'delivery limit',
                'exc_message', 'message delivered ' || r.deliveries
                               || ' times; last lease expired'), v_now);
            o_outcome := 'dead';
        ELSE
            PERFORM push_history(r.id, attempt_entry(r.id, 'lease expired', jsonb_build_object(
                'exc_message',
                'lease expired (claimed by ' || COALESCE(r.worker, '?') || ')'), v_now));
            o_outcome := requeue(r.id, v_now, p_backstop);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
