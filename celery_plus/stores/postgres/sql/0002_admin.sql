-- celery-plus durable store on PostgreSQL, migration 0002: the admin (celery_plus/admin).
--
-- The admin's state changes (stores/redis/lua/admin/*.lua and stores/sqlite/admin.py in PL/pgSQL): each is
-- ONE function call, i.e. one transaction, that locks the job's row (`FOR UPDATE`) and
-- re-checks its state before changing it, so two operators acting on one job at once have one
-- winner (the second waits for the first's commit, then sees the new state: a no-op).
-- Rows are (id, outcome, extra): ('enqueued' | 'discarded' | 'canceled', previous state),
-- ('noop', state), ('skipped', state) (no longer in the bulk scope), ('missing', ''), or
-- ('conflict', holder id) for a retry whose unique key another job holds.
--
-- Also: maintenance prunes `discarded` records with the completed retention, like `canceled`
-- ones (maintain() is replaced; it is 0001's with that one prune added).

-- Is a job (task name, queue, finish time) in a bulk operation's scope? NULL = any.
CREATE FUNCTION admin_in_scope(p_name text, p_queue text, p_finished bigint, p_task text,
                               p_scope_queue text, p_older bigint, p_now bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (p_task IS NULL OR p_name = p_task)
       AND (p_scope_queue IS NULL OR p_queue = p_scope_queue)
       AND (p_older IS NULL OR COALESCE(p_finished, 0) <= p_now - p_older)
$$;

-- An admin entry of the job's history (the delivery counter as it is now).
CREATE FUNCTION admin_entry(p_id text, p_deliveries integer, p_outcome text, p_now bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM push_history(p_id, jsonb_build_object(
        'delivery', COALESCE(p_deliveries, 0), 'worker', '', 'started_ms', p_now,
        'finished_ms', p_now, 'outcome', p_outcome));
END
$$;

-- == retry (stores/redis/lua/admin/retry.lua) =============================================================
-- failed -> enqueued for each id (in order), same task id: deliveries back to 0, the back of
-- its queue at its priority (new seq, enqueued_ms = now), finished_ms cleared, history and
-- last error kept plus an 'admin retry' entry. The unique hold is taken again with the publish
-- rules (pending/running: held by this job with the backstop; ttl: taken for the ttl if free);
-- if ANOTHER job holds the key, nothing changes and the row names the holder.
CREATE FUNCTION admin_retry(p_ids text[], p_task text, p_queue text, p_older bigint,
                            p_backstop bigint)
RETURNS TABLE (o_id text, o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_id text;
    v_holder text;
    r record;
BEGIN
    FOREACH v_id IN ARRAY COALESCE(p_ids, '{}'::text[]) LOOP
        o_id := v_id;
        SELECT j.state, j.name, j.queue, j.finished_ms, j.unique_lock, j.unique_window,
               j.unique_ttl_ms, j.score, j.deliveries
        INTO r FROM jobs j WHERE j.id = v_id FOR UPDATE;
        IF NOT FOUND THEN
            o_outcome := 'missing';
            o_extra := '';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF r.state <> 'failed' THEN
            o_outcome := 'noop';
            o_extra := r.state;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT admin_in_scope(r.name, r.queue, r.finished_ms, p_task, p_queue, p_older,
                              v_now) THEN
            o_outcome := 'skipped';
            o_extra := r.state;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF r.unique_lock IS NOT NULL AND r.unique_lock <> '' THEN
            v_holder := live_holder(r.unique_lock, v_now);
            IF v_holder IS NULL OR v_holder = v_id THEN
                IF r.unique_window = 'ttl' THEN
                    IF v_holder IS NULL AND COALESCE(r.unique_ttl_ms, 0) > 0 THEN
                        v_holder := take_hold(r.unique_lock, v_id, v_now + r.unique_ttl_ms,
                                              v_now, false);
                    END IF;
                ELSE
                    v_holder := take_hold(r.unique_lock, v_id, v_now + p_backstop, v_now,
                                          true);
                END IF;
            END IF;
            IF v_holder IS NOT NULL AND v_holder <> v_id THEN
                -- Held by another job (or taken by a publisher just now): nothing changed.
                o_outcome := 'conflict';
                o_extra := v_holder;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        PERFORM admin_entry(v_id, r.deliveries, 'admin retry', v_now);
        UPDATE jobs SET deliveries = 0, enqueued_ms = v_now, finished_ms = NULL,
                        score = (r.score / 1099511627776) * 1099511627776 + nextval('seq')
        WHERE id = v_id;
        PERFORM enqueue(v_id);
        o_outcome := 'enqueued';
        o_extra := 'failed';
        RETURN NEXT;
    END LOOP;
END
$$;

-- == discard (stores/redis/lua/admin/discard.lua) =========================================================
-- failed -> discarded; the record is kept (finished_ms = now) and pruned like completed ones.
CREATE FUNCTION admin_discard(p_id text)
RETURNS TABLE (o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_state text;
    v_deliveries integer;
BEGIN
    SELECT j.state, j.deliveries INTO v_state, v_deliveries FROM jobs j WHERE j.id = p_id
    FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_extra := '';
    ELSIF v_state <> 'failed' THEN
        o_outcome := 'noop';
        o_extra := v_state;
    ELSE
        PERFORM admin_entry(p_id, v_deliveries, 'admin discard', v_now);
        UPDATE jobs SET state = 'discarded', finished_ms = v_now WHERE id = p_id;
        o_outcome := 'discarded';
        o_extra := 'failed';
    END IF;
    RETURN NEXT;
END
$$;

-- == cancel (stores/redis/lua/admin/cancel.lua) ===========================================================
-- enqueued | scheduled | blocked -> canceled: out of its queue, the schedule or its group's
-- blocked jobs (a waiting job holds no slot), its non-TTL hold released if it holds it,
-- finished_ms = now; pruned like completed records. Running jobs are not touched. A claim
-- racing the cancel either got the row first (the cancel then sees 'running': a no-op) or
-- skips it (claims read with SKIP LOCKED) and never sees it again.
CREATE FUNCTION admin_cancel(p_id text)
RETURNS TABLE (o_outcome text, o_extra text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    r record;
BEGIN
    SELECT j.state, j.unique_lock, j.unique_window, j.deliveries INTO r
    FROM jobs j WHERE j.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'missing';
        o_extra := '';
    ELSIF r.state NOT IN ('enqueued', 'scheduled', 'blocked') THEN
        o_outcome := 'noop';
        o_extra := r.state;
    ELSE
        PERFORM release_hold(r.unique_lock, r.unique_window, p_id, v_now);
        PERFORM admin_entry(p_id, r.deliveries, 'admin cancel', v_now);
        UPDATE jobs SET state = 'canceled', finished_ms = v_now WHERE id = p_id;
        o_outcome := 'canceled';
        o_extra := r.state;
    END IF;
    RETURN NEXT;
END
$$;

-- == purge of finished records (stores/redis/lua/admin/delete.lua) ========================================
-- Delete the records of `p_ids` still in `p_state` (a finished state) and in the scope;
-- returns the ids deleted, in order.
CREATE FUNCTION admin_purge(p_state text, p_ids text[], p_task text, p_queue text,
                            p_older bigint)
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_id text;
    r record;
BEGIN
    IF p_state NOT IN ('completed', 'failed', 'canceled', 'discarded') THEN
        RAISE EXCEPTION 'admin_purge: % is not a finished state', p_state;
    END IF;
    FOREACH v_id IN ARRAY COALESCE(p_ids, '{}'::text[]) LOOP
        SELECT j.state, j.name, j.queue, j.finished_ms INTO r
        FROM jobs j WHERE j.id = v_id FOR UPDATE;
        CONTINUE WHEN NOT FOUND OR r.state <> p_state;
        CONTINUE WHEN NOT admin_in_scope(r.name, r.queue, r.finished_ms, p_task, p_queue,
                                         p_older, v_now);
        DELETE FROM jobs WHERE id = v_id;
        RETURN NEXT v_id;
    END LOOP;
END
$$;

-- == maintain (maintain.lua): 0001's, now pruning discarded records too ======================
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
