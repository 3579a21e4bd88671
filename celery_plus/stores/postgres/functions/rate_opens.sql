-- When the group's window next has room: its oldest start leaves it, or its oldest claim
-- not started yet lapses.
CREATE OR REPLACE FUNCTION rate_opens(p_group text, p_window bigint, p_now bigint) RETURNS bigint
LANGUAGE sql AS $$
    SELECT COALESCE(min(CASE WHEN started THEN at_ms + p_window + 1 ELSE at_ms END), p_now)
    FROM rate_claims WHERE rate_group = p_group
$$;
