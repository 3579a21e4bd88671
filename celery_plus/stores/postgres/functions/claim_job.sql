-- Claim one job by id, for the coordination store (celery_plus/coordination): another broker
-- delivered the job's message, and the worker claims the job's record by task id before
-- running it. Touches one `jobs` row (locked FOR UPDATE), `slots` (counted and taken under the
-- group's advisory lock, after the row lock, the order settle() uses), `holds` and `stats`.
--
-- An enqueued, scheduled (due or not: the other broker decides when) or blocked job is claimed
-- as claim() claims it: slot taken, pending hold dropped / running hold refreshed, token+1,
-- deliveries+1, lease = now + lease. A full group changes nothing ('blocked'); running,
-- finished and unknown jobs are reported as they are. Returns (outcome, state, token,
-- deliveries, lease ms left) with outcome claimed | blocked | held | finished | missing.
CREATE OR REPLACE FUNCTION claim_job(p_id text, p_worker text, p_lease_ms bigint, p_backstop bigint,
                          OUT o_outcome text, OUT o_state text, OUT o_token bigint,
                          OUT o_deliveries integer, OUT o_lease_left bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
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
    IF r.state <> ALL (waiting_states()) THEN
        o_outcome := 'finished';
        RETURN;
    END IF;
    IF r.conc_group IS NOT NULL AND r.conc_group <> '' THEN
        PERFORM group_lock(r.conc_group);
        IF NOT take_slot(p_id, r.conc_group, r.conc_limit, false) THEN
            o_outcome := 'blocked';
            RETURN;
        END IF;
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
