-- Delete `p_state` records finished before `p_before`, then the oldest beyond `p_max_count`,
-- at most `p_batch` rows each; returns how many.
CREATE OR REPLACE FUNCTION prune(p_state text, p_before bigint, p_max_count bigint, p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_pruned integer;
    v_more integer;
    v_excess bigint;
BEGIN
    -- The state is spelled as a literal so the planner uses the partial index jobs_finished.
    EXECUTE format(
        'DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = %L '
        'AND finished_ms <= $1 ORDER BY finished_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED)',
        p_state) USING p_before, p_batch;
    GET DIAGNOSTICS v_pruned = ROW_COUNT;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM jobs WHERE state = %L LIMIT $1) t',
                   p_state) INTO v_excess USING p_max_count + p_batch;
    v_excess := v_excess - p_max_count;
    IF v_excess > 0 THEN
        EXECUTE format(
            'DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = %L '
            'ORDER BY finished_ms, id LIMIT $1 FOR UPDATE SKIP LOCKED)', p_state)
        USING least(v_excess, p_batch);
        GET DIAGNOSTICS v_more = ROW_COUNT;
        v_pruned := v_pruned + v_more;
    END IF;
    RETURN v_pruned;
END
$$;
