CREATE OR REPLACE FUNCTION claim_job(p_id text, p_worker text, p_lease_ms bigint, p_backstop bigint,
                          OUT o_outcome text, OUT o_state text, OUT o_token bigint,
                          OUT o_deliveries integer, OUT o_lease_left bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_used bigint;
    r record;
BEGIN
    o_token := 0;
    o_deliveries := 0;
    o_lease_left := 0;
    SELECT j.state, j.conc_group, j.conc_limit, j.unique_lock, j.unique_window, j.deliveries,
           j.lease_expires_ms
    INTO r FROM jobs j WHERE j.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_state := '';
        RETURN;
    END IF;
    o_state := r.state;
    IF r.state = 'running' THEN
        o_outcome := 'held';
        o_deliveries := r.deliveries;
        o_lease_left := greatest(COALESCE(r.lease_expires_ms, v_now) - v_now, 0);
        RETURN;
    END IF;
    IF r.state NOT IN ('enqueued', 'scheduled', 'blocked') THEN
        o_outcome := 'finished';
        RETURN;
    END IF;
    IF r.conc_group IS NOT NULL AND r.conc_group <> '' THEN
        PERFORM group_lock(r.conc_group);
        SELECT count(*) INTO v_used FROM slots s WHERE s.conc_group = r.conc_group;
        IF v_used >= r.conc_limit THEN
            PERFORM stat('blocked');
            o_outcome := 'blocked';
            RETURN;
        END IF;
        INSERT INTO slots (conc_group, job_id) VALUES (r.conc_group, p_id)
        ON CONFLICT DO NOTHING;
    END IF;
    IF r.unique_lock IS NOT NULL AND r.unique_lock <> '' THEN
        IF r.unique_window = 'pending' THEN
            PERFORM drop_hold(r.unique_lock, p_id, v_now);
        ELSIF r.unique_window = 'running' THEN
            PERFORM refresh_hold(r.unique_lock, p_id, v_now, p_backstop);
        END IF;
    END IF;
    UPDATE jobs SET state = 'running', worker = p_worker, started_ms = v_now,
                    deliveries = jobs.deliveries + 1, token = COALESCE(jobs.token, 0) + 1,
                    lease_expires_ms = v_now + p_lease_ms
    WHERE id = p_id
    RETURNING jobs.token, jobs.deliveries INTO o_token, o_deliveries;
    o_outcome := 'claimed';
    o_state := 'running';
END
$$;
