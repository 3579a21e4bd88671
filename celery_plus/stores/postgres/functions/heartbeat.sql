-- Renew the leases of claims still current; returns the ids whose claim was not renewed
-- (ended by its own run, or lost), in order: heartbeat_verdicts() without the verdicts, for
-- processes of releases before it (a rolling upgrade). A (job, token) pair is not renewed
-- unless that job is running under that token (also beside a current claim of the same job).
CREATE OR REPLACE FUNCTION heartbeat(p_ids text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RETURN QUERY
    SELECT h.id FROM heartbeat_verdicts(p_ids, p_tokens, p_lease_ms) AS v
    JOIN unnest(p_ids) WITH ORDINALITY AS h(id, n) ON h.n = v.o_n
    ORDER BY v.o_n;
END
$$;
