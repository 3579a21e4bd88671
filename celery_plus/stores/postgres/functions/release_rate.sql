-- Groups whose window has room (at most `p_groups`, each not busy in another transaction)
-- get that many parked jobs back, oldest first, keeping their place in line.
CREATE OR REPLACE FUNCTION release_rate(p_now bigint, p_groups integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_group text;
    v_limit integer;
    v_window bigint;
    v_room bigint;
    v_opens bigint;
    v_id text;
    v_released integer := 0;
BEGIN
    FOR v_group IN
        SELECT w.rate_group FROM rate_wake w WHERE w.at_ms <= p_now ORDER BY w.at_ms
        LIMIT p_groups FOR UPDATE SKIP LOCKED
    LOOP
        CONTINUE WHEN NOT group_try_lock(rate_key(v_group));
        SELECT j.rate_limit, j.rate_window_ms INTO v_limit, v_window FROM jobs j
        WHERE j.state = 'blocked' AND j.rate_parked AND j.rate_group = v_group
        ORDER BY j.score LIMIT 1;
        IF NOT FOUND THEN
            DELETE FROM rate_wake WHERE rate_group = v_group;
            CONTINUE;
        END IF;
        v_room := rate_room(v_group, v_limit, v_window, p_now);
        IF v_room > 0 THEN
            FOR v_id IN
                SELECT j.id FROM jobs j
                WHERE j.state = 'blocked' AND j.rate_parked AND j.rate_group = v_group
                ORDER BY j.score LIMIT v_room FOR UPDATE SKIP LOCKED
            LOOP
                PERFORM enqueue(v_id);
                v_released := v_released + 1;
            END LOOP;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'blocked' AND j.rate_parked
                       AND j.rate_group = v_group) THEN
            DELETE FROM rate_wake WHERE rate_group = v_group;
        ELSE
            -- (an empty window: the jobs given back are not claimed yet; look again in a
            -- second)
            v_opens := rate_opens(v_group, v_window, p_now);
            UPDATE rate_wake SET at_ms = CASE WHEN v_opens > p_now THEN v_opens
                                              ELSE p_now + 1000 END
            WHERE rate_group = v_group;
        END IF;
    END LOOP;
    RETURN v_released;
END
$$;
