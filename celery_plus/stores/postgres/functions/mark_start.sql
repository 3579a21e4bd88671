-- The rule itself, once, as two expressions over a job's row (SQL functions the planner inlines
-- into the UPDATE that calls them: mark_start() below, and settle()'s ack, which applies the
-- mark in its own UPDATE): the start and the start mark after claim p_token's mark p_mark.
CREATE OR REPLACE FUNCTION marked_start(p_started bigint, p_start_mark bigint, p_token bigint,
                                        p_mark bigint, p_now bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_mark >= 0 AND p_start_mark IS DISTINCT FROM p_token
                THEN greatest(COALESCE(p_started, p_now), least(p_now, p_now - p_mark))
                ELSE p_started END
$$;

CREATE OR REPLACE FUNCTION marked_token(p_start_mark bigint, p_token bigint, p_mark bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_mark IS NULL OR p_start_mark IS NOT DISTINCT FROM p_token
                THEN p_start_mark
                WHEN p_mark < 0 THEN -p_token
                ELSE p_token END
$$;

-- Apply a worker's start mark to running claim p_token of job p_id (a heartbeat's or a
-- settle's; Redis lib.lua mark_start): NULL = not known (nothing); < 0 = its task has not
-- started yet (reserved); n >= 0 = it started n ms ago: started_ms moves there (never before
-- the claim, never after now), once per claim (celery_plus/model/store.py start_time).
CREATE OR REPLACE FUNCTION mark_start(p_id text, p_token bigint, p_mark bigint, p_now bigint)
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF p_mark IS NULL THEN
        RETURN;
    END IF;
    UPDATE jobs SET started_ms = marked_start(started_ms, start_mark, p_token, p_mark, p_now),
                    start_mark = marked_token(start_mark, p_token, p_mark)
    WHERE id = p_id AND token = p_token AND start_mark IS DISTINCT FROM p_token;
END
$$;
