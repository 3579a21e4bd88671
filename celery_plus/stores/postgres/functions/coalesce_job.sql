-- Complete a job as a duplicate of the one holding its unique key.
CREATE OR REPLACE FUNCTION coalesce_job(p_id text, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = 'completed', finished_ms = p_now, reason = 'coalesced'
    WHERE id = p_id;
    PERFORM stat('deduplicated');
END
$$;
