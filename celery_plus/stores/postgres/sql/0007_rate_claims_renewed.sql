-- celery-plus durable store on PostgreSQL, migration 0007: a renewed lease renews the count of
-- a rate-group claim not started yet (Redis heartbeat.lua, P:ratep:{group}).
--
-- * heartbeat()  as in 0001, and a renewed claim that counts in its rate group's window as not
--                started yet (rate_claims, started = false) keeps counting until the new lease
--                deadline: a job prefetched behind a long task never lets its window take more
--                than the limit.

CREATE OR REPLACE FUNCTION heartbeat(p_ids text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_renewed text[];
BEGIN
    PERFORM 1 FROM jobs j WHERE j.id = ANY (p_ids) ORDER BY j.id FOR UPDATE;
    WITH renewed AS (
        UPDATE jobs SET lease_expires_ms = v_now + p_lease_ms
        FROM unnest(p_ids, p_tokens) AS h(id, token)
        WHERE jobs.id = h.id AND jobs.state = 'running' AND jobs.token = h.token
        RETURNING jobs.id, jobs.token, jobs.rate_group
    ), counted AS (  -- a data-modifying WITH runs to completion, read or not
        UPDATE rate_claims rc SET at_ms = v_now + p_lease_ms
        FROM renewed r
        WHERE r.rate_group IS NOT NULL AND rc.rate_group = r.rate_group
          AND rc.job_id = r.id AND rc.token = r.token AND NOT rc.started
    )
    SELECT array_agg(renewed.id) INTO v_renewed FROM renewed;
    RETURN QUERY
    SELECT h.id FROM unnest(p_ids) WITH ORDINALITY AS h(id, n)
    WHERE h.id <> ALL (COALESCE(v_renewed, '{}'))
    ORDER BY h.n;
END
$$;
