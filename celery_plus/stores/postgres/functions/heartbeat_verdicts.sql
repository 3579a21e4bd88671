-- Renew the leases of claims still current, and say what became of the others, in one step:
-- one row per (job, token) pair NOT renewed (its job does not run under that token), with its
-- position in the arrays (1 = the first) and its verdict, in order; a pair left out was
-- renewed. 'ended': its own run ended the claim (continued: 'retried' under its token in the
-- history; acked: completed under its token with no reason; given back unstarted: waiting
-- under its token with no delivery counted), unless the history records any other end under
-- its token (a recovery, whatever the job became since); 'lost': anything else
-- (celery_plus/model/rules.py heartbeat_verdict, Redis heartbeat.lua). A renewed claim that counts
-- in its rate group's window as not started yet (rate_claims, started = false) keeps counting
-- until the new deadline. p_starts: the worker's start mark of each claim (NULL: not known),
-- applied to the renewed ones (mark_start()).
CREATE OR REPLACE FUNCTION heartbeat_verdicts(p_ids text[], p_tokens bigint[], p_lease_ms bigint,
                                              p_starts bigint[])
RETURNS TABLE (o_n integer, o_verdict text)
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
    IF p_starts IS NOT NULL THEN
        PERFORM mark_start(h.id, h.token, h.mark, v_now)
        FROM unnest(p_ids, p_tokens, p_starts) AS h(id, token, mark)
        JOIN jobs j ON j.id = h.id AND j.state = 'running' AND j.token = h.token
        WHERE h.mark IS NOT NULL;
    END IF;
    RETURN QUERY
    SELECT h.n::integer, CASE
        WHEN j.id IS NULL THEN 'lost'
        WHEN a.other_end THEN 'lost'
        WHEN a.continued THEN 'ended'
        WHEN j.token = h.token AND (
                 (j.state = 'completed' AND COALESCE(j.reason, '') = '')
              OR (j.state = ANY (waiting_states()) AND j.deliveries = 0))
            THEN 'ended'
        ELSE 'lost' END
    FROM unnest(p_ids, p_tokens) WITH ORDINALITY AS h(id, token, n)
    LEFT JOIN jobs j ON j.id = h.id
    LEFT JOIN LATERAL (
        SELECT bool_or(e.value ->> 'outcome' IS DISTINCT FROM 'retried') AS other_end,
               bool_or(e.value ->> 'outcome' = 'retried') AS continued
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(j.history) = 'array'
                                       THEN j.history ELSE '[]'::jsonb END) AS e
        WHERE e.value -> 'token' = to_jsonb(h.token)
    ) a ON true
    WHERE j.id IS NULL OR j.state <> 'running' OR j.token IS DISTINCT FROM h.token
    ORDER BY h.n;
END
$$;

-- The form of functions release 6 and earlier (no start marks), for their workers during a
-- rolling upgrade.
CREATE OR REPLACE FUNCTION heartbeat_verdicts(p_ids text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS TABLE (o_n integer, o_verdict text)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM heartbeat_verdicts(p_ids, p_tokens, p_lease_ms, NULL::bigint[]);
$$;
