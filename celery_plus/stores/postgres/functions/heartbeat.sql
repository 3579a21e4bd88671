-- Renew the leases of claims still current; returns the ids whose claim was lost, in order.
-- A (job, token) pair is lost unless that job is running under that token (also beside a
-- current claim of the same job). A renewed claim that counts in its rate group's window as
-- not started yet (rate_claims, started = false) keeps counting until the new deadline.
CREATE OR REPLACE FUNCTION heartbeat(p_ids text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    PERFORM 1 FROM jobs j WHERE j.id = ANY (p_ids) ORDER BY j.id FOR UPDATE;
    WITH renewed AS (
        UPDATE jobs SET lease_expires_ms = v_now + p_lease_ms
        FROM unnest(p_ids, p_tokens) AS h(id, token)
        WHERE jobs.id = h.id AND jobs.state = 'running' AND jobs.token = h.token
        RETURNING jobs.id, jobs.token, jobs.rate_group
    )
    UPDATE rate_claims rc SET at_ms = v_now + p_lease_ms
    FROM renewed r
    WHERE r.rate_group IS NOT NULL AND rc.rate_group = r.rate_group
      AND rc.job_id = r.id AND rc.token = r.token AND NOT rc.started
      AND rc.at_ms >= v_now;  -- a lapsed claim is not revived
    RETURN QUERY
    SELECT h.id FROM unnest(p_ids, p_tokens) WITH ORDINALITY AS h(id, token, n)
    WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = h.id AND j.state = 'running'
                                              AND j.token = h.token)
    ORDER BY h.n;
END
$$;
