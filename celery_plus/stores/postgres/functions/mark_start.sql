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
    IF p_mark < 0 THEN
        UPDATE jobs SET start_mark = -p_token
        WHERE id = p_id AND token = p_token AND start_mark IS DISTINCT FROM p_token;
    ELSE
        UPDATE jobs SET started_ms = greatest(COALESCE(started_ms, p_now),
                                              least(p_now, p_now - p_mark)),
                        start_mark = p_token
        WHERE id = p_id AND token = p_token AND start_mark IS DISTINCT FROM p_token;
    END IF;
END
$$;
