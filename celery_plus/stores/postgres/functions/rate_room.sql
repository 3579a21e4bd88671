-- Room left in the group's window: the limit minus its starts of the last `p_window` ms and
-- its claims not started yet (lapsed ones dropped). Caller holds the group's lock.
CREATE OR REPLACE FUNCTION rate_room(p_group text, p_limit integer, p_window bigint, p_now bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rate_claims WHERE rate_group = p_group
        AND ((started AND at_ms < p_now - p_window) OR (NOT started AND at_ms < p_now));
    RETURN p_limit - (SELECT count(*) FROM rate_claims WHERE rate_group = p_group);
END
$$;
