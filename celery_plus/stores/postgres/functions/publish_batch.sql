-- Publish many messages in one call (publish_many): the arrays hold the 17-argument
-- publish()'s arguments, one element per job, in publish order (p_backstop is shared).
-- Rows: (o_ord, holder, state, continued, fenced) per job, o_ord its 1-based place in the
-- arrays, with publish()'s meaning.
--
-- The result is that of publish() called once per job, in order: a job with no unique key, no
-- concurrency group and no lease token, whose id is new and appears once in the batch, is
-- stored by one INSERT for all of them (publish() would store it with its plain INSERT); every
-- other job goes through publish() itself, in order. Each job's score is taken in batch order
-- before either, so the queue keeps the batch's order whichever path stored a job.
CREATE OR REPLACE FUNCTION publish_batch(p_ids text[], p_queues text[], p_msgs bytea[],
                        p_names text[], p_priorities integer[], p_etas bigint[],
                        p_locks text[], p_windows text[], p_ttls bigint[], p_groups text[],
                        p_limits integer[], p_mdls integer[], p_backstop bigint,
                        p_continues bigint[], p_rate_groups text[], p_rate_limits integer[],
                        p_rate_windows bigint[])
RETURNS TABLE (o_ord integer, o_holder text, o_state text, o_continued boolean,
               o_fenced boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
    v_n integer := COALESCE(cardinality(p_ids), 0);
    v_seqs bigint[];
    v_twice text[];
    v_stored integer[];
    v_queue text;
    i integer;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- One sequence value per job, in batch order (publish() takes one per job the same way).
    v_seqs := ARRAY(SELECT nextval('seq') FROM generate_series(1, v_n));
    v_twice := ARRAY(SELECT d.id FROM unnest(p_ids) d(id) GROUP BY d.id HAVING count(*) > 1);
    WITH stored AS (
        INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries, enqueued_ms,
                          due_ms, rate_group, rate_limit, rate_window_ms, rate_parked)
        SELECT b.id, b.queue, b.name, b.msg,
               CASE WHEN b.eta > v_now THEN 'scheduled' ELSE 'enqueued' END,
               b.priority::bigint * priority_factor() + v_seqs[b.ord], b.mdl, v_now, b.eta,
               CASE WHEN b.rate_group <> '' THEN store_key(b.rate_group) END,
               CASE WHEN b.rate_group <> '' THEN b.rate_limit END,
               CASE WHEN b.rate_group <> '' THEN b.rate_window END, false
        FROM unnest(p_ids, p_queues, p_msgs, p_names, p_priorities, p_etas, p_locks,
                    p_groups, p_mdls, p_continues, p_rate_groups, p_rate_limits,
                    p_rate_windows)
             WITH ORDINALITY AS b(id, queue, msg, name, priority, eta, lock, grp, mdl, cont,
                                  rate_group, rate_limit, rate_window, ord)
        WHERE COALESCE(b.lock, '') = '' AND COALESCE(b.grp, '') = ''
          AND NOT COALESCE(b.cont > 0, false) AND b.id <> ALL (v_twice)
        ON CONFLICT (id) DO NOTHING
        RETURNING id
    )
    SELECT array_agg(b.ord::integer)
    FROM stored s JOIN unnest(p_ids) WITH ORDINALITY AS b(id, ord) ON b.id = s.id
    INTO v_stored;
    v_stored := COALESCE(v_stored, '{}');
    -- Their wake-ups: one per queue (pg_notify folds equal ones within a transaction anyway).
    FOR v_queue IN SELECT DISTINCT p_queues[k] FROM unnest(v_stored) k LOOP
        PERFORM wake(v_queue);
    END LOOP;
    RETURN QUERY SELECT k, NULL::text,
                        CASE WHEN p_etas[k] > v_now THEN 'scheduled' ELSE 'enqueued' END,
                        false, false
                 FROM unnest(v_stored) k;
    FOR i IN SELECT g FROM generate_series(1, v_n) g LEFT JOIN unnest(v_stored) s(k) ON s.k = g
             WHERE s.k IS NULL ORDER BY g LOOP
        o_ord := i;
        SELECT p.o_holder, p.o_state, p.o_continued, p.o_fenced
        INTO o_holder, o_state, o_continued, o_fenced
        FROM publish(p_ids[i], p_queues[i], p_msgs[i], p_names[i], p_priorities[i],
                     p_etas[i], p_locks[i], p_windows[i], p_ttls[i], p_groups[i],
                     p_limits[i], p_mdls[i], p_backstop, p_continues[i], p_rate_groups[i],
                     p_rate_limits[i], p_rate_windows[i]) p;
        IF o_holder IS NULL AND NOT o_fenced THEN
            -- Its place in the batch's order, not after the jobs stored above.
            UPDATE jobs SET score = p_priorities[i]::bigint * priority_factor() + v_seqs[i]
            WHERE id = p_ids[i];
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
