-- Bounded housekeeping: promote due jobs, drop stale slot entries and unblock groups with
-- free slots (50 groups a pass, going on where the last pass stopped), prune finished
-- records past retention (discarded and canceled ones with the completed retention), drop
-- expired holds and transient messages, fold counters.
-- Runs when the maintenance interval passed — for the elected leader (p_leader); for any
-- other worker only once the leader missed two intervals (a leader alive but stuck).
-- Returns (ran, promoted, unblocked, pruned).
CREATE OR REPLACE FUNCTION maintain(p_leader boolean, p_interval_ms bigint, p_batch integer,
                         p_comp_ret bigint, p_comp_max bigint, p_dead_ret bigint,
                         p_dead_max bigint,
                         OUT o_ran boolean, OUT o_promoted integer, OUT o_unblocked integer,
                         OUT o_pruned integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_until bigint;
    v_cursor text;
    v_start text;
    v_group text;
    v_groups text[] := '{}';
    v_limit integer;
    v_free bigint;
    v_wrapped boolean := false;
BEGIN
    o_promoted := 0;
    o_unblocked := 0;
    o_pruned := 0;
    SELECT m.value INTO v_until FROM meta m WHERE m.key = 'maint' FOR UPDATE;
    IF v_until >= v_now OR (NOT p_leader AND v_until + 2 * p_interval_ms >= v_now) THEN
        o_ran := false;
        RETURN;
    END IF;
    UPDATE meta SET value = v_now + p_interval_ms WHERE key = 'maint';
    o_ran := true;
    o_promoted := promote_due(v_now, p_batch);

    -- Groups having blocked jobs, from the cursor on (wrapping around once).
    SELECT m.note INTO v_start FROM meta m WHERE m.key = 'group_cursor' FOR UPDATE;
    v_cursor := v_start;
    WHILE cardinality(v_groups) < 50 LOOP
        SELECT min(j.conc_group) INTO v_group FROM jobs j
        WHERE j.state = 'blocked' AND j.conc_group > v_cursor;
        IF v_group IS NULL OR (v_wrapped AND v_group > v_start) THEN
            EXIT WHEN v_wrapped OR v_start = '';
            v_wrapped := true;
            v_cursor := '';
            CONTINUE;
        END IF;
        EXIT WHEN v_group = ANY (v_groups);
        v_groups := v_groups || v_group;
        v_cursor := v_group;
    END LOOP;
    UPDATE meta SET note = CASE WHEN cardinality(v_groups) >= 50 THEN v_groups[50] ELSE '' END
    WHERE key = 'group_cursor';
    FOREACH v_group IN ARRAY v_groups LOOP
        -- A busy group is being settled or claimed right now: leave it to that transaction.
        CONTINUE WHEN NOT group_try_lock(v_group);
        -- Slot entries whose job is no longer running are stale.
        DELETE FROM slots s WHERE s.conc_group = v_group AND NOT EXISTS (
            SELECT 1 FROM jobs j WHERE j.id = s.job_id AND j.state = 'running');
        SELECT j.conc_limit INTO v_limit FROM jobs j
        WHERE j.state = 'blocked' AND j.conc_group = v_group ORDER BY j.score LIMIT 1;
        v_free := COALESCE(v_limit, 0)
                  - (SELECT count(*) FROM slots s WHERE s.conc_group = v_group);
        WHILE v_free > 0 LOOP
            EXIT WHEN NOT unblock_one(v_group);
            v_free := v_free - 1;
            o_unblocked := o_unblocked + 1;
        END LOOP;
    END LOOP;

    o_pruned := prune('completed', v_now - p_comp_ret, p_comp_max, p_batch)
                + prune('failed', v_now - p_dead_ret, p_dead_max, p_batch)
                + prune('canceled', v_now - p_comp_ret, p_comp_max, p_batch)
                + prune('discarded', v_now - p_comp_ret, p_comp_max, p_batch);
    -- Expired holds and transient messages are absent already; drop their rows.
    DELETE FROM holds WHERE lock IN (
        SELECT h.lock FROM holds h WHERE h.expires_ms < v_now
        ORDER BY h.expires_ms LIMIT p_batch FOR UPDATE SKIP LOCKED);
    DELETE FROM transient WHERE id IN (
        SELECT t.id FROM transient t WHERE t.expires_ms < v_now
        ORDER BY t.expires_ms LIMIT p_batch FOR UPDATE SKIP LOCKED);
    -- Fold the counter increments into one row per name.
    WITH folded AS (DELETE FROM stats RETURNING name, n)
    INSERT INTO stats (name, n) SELECT f.name, sum(f.n) FROM folded f GROUP BY f.name;
END
$$;
