-- Publish many messages in one call (publish_many): the arrays hold the 17-argument
-- publish()'s arguments, one element per job, in publish order (p_backstop is shared).
-- Rows: (o_ord, holder, state, continued, fenced) per job, o_ord its 1-based place in the
-- arrays, with publish()'s meaning.
--
-- The result is that of publish() called once per job, in order: a job with no unique key, no
-- concurrency group and no lease token, whose id is not in the store and appears once in the
-- batch (a plain job), is stored by one INSERT for all of them (publish() would store it with
-- its plain INSERT); every other job goes through publish() itself, in order, before that
-- INSERT (the two kinds touch different rows, so their order decides nothing).
--
-- Places in line (rules.score), as publish() called per job: one sequence number per job
-- stored, none for a duplicate or a fenced one. publish() takes one for each job it stores,
-- the plain jobs one each after it, and these numbers go, in ascending order, to the stored
-- jobs in batch order: the queue keeps the batch's order whichever path stored a job.
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
    v_twice text[];
    v_plain boolean[];
    v_takes boolean[];
    v_seqs bigint[] := '{}';
    v_place bigint[];
    v_stored integer[];
    v_queue text;
    i integer;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_twice := ARRAY(SELECT d.id FROM unnest(p_ids) d(id) GROUP BY d.id HAVING count(*) > 1);
    -- Per job: plain or not; then, whether it takes a place in line (is stored).
    v_plain := ARRAY(
        SELECT COALESCE(COALESCE(b.lock, '') = '' AND COALESCE(b.grp, '') = ''
                        AND NOT COALESCE(b.cont > 0, false) AND b.id <> ALL (v_twice)
                        AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = b.id), false)
        FROM unnest(p_ids, p_locks, p_groups, p_continues)
             WITH ORDINALITY AS b(id, lock, grp, cont, ord)
        ORDER BY b.ord);
    v_takes := v_plain;
    -- The other jobs through publish(), in batch order; each stored one took a number.
    FOR i IN SELECT g FROM generate_series(1, v_n) g WHERE NOT v_plain[g] ORDER BY g LOOP
        o_ord := i;
        SELECT p.o_holder, p.o_state, p.o_continued, p.o_fenced
        INTO o_holder, o_state, o_continued, o_fenced
        FROM publish(p_ids[i], p_queues[i], p_msgs[i], p_names[i], p_priorities[i],
                     p_etas[i], p_locks[i], p_windows[i], p_ttls[i], p_groups[i],
                     p_limits[i], p_mdls[i], p_backstop, p_continues[i], p_rate_groups[i],
                     p_rate_limits[i], p_rate_windows[i]) p;
        IF o_holder IS NULL AND NOT o_fenced THEN
            v_takes[i] := true;
            v_seqs := v_seqs || (SELECT j.score - p_priorities[i]::bigint * priority_factor()
                                 FROM jobs j WHERE j.id = p_ids[i]);
        END IF;
        RETURN NEXT;
    END LOOP;
    -- The plain jobs' numbers; then the k-th lowest number to the k-th job taking one.
    v_seqs := v_seqs || ARRAY(SELECT nextval('seq') FROM unnest(v_plain) p WHERE p);
    v_place := ARRAY(
        SELECT COALESCE(n.seq, 0)
        FROM generate_series(1, v_n) g
        LEFT JOIN (SELECT t.ord, row_number() OVER (ORDER BY t.ord) AS r
                   FROM unnest(v_takes) WITH ORDINALITY AS t(takes, ord) WHERE t.takes) k
               ON k.ord = g
        LEFT JOIN (SELECT s.seq, row_number() OVER (ORDER BY s.seq) AS r
                   FROM unnest(v_seqs) AS s(seq)) n ON n.r = k.r
        ORDER BY g);
    WITH stored AS (
        INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries, enqueued_ms,
                          due_ms, rate_group, rate_limit, rate_window_ms, rate_parked)
        SELECT b.id, b.queue, b.name, b.msg,
               CASE WHEN b.eta > v_now THEN 'scheduled' ELSE 'enqueued' END,
               b.priority::bigint * priority_factor() + v_place[b.ord], b.mdl, v_now, b.eta,
               CASE WHEN b.rate_group <> '' THEN store_key(b.rate_group) END,
               CASE WHEN b.rate_group <> '' THEN b.rate_limit END,
               CASE WHEN b.rate_group <> '' THEN b.rate_window END, false
        FROM unnest(p_ids, p_queues, p_msgs, p_names, p_priorities, p_etas, p_mdls,
                    p_rate_groups, p_rate_limits, p_rate_windows)
             WITH ORDINALITY AS b(id, queue, msg, name, priority, eta, mdl, rate_group,
                                  rate_limit, rate_window, ord)
        WHERE v_plain[b.ord]
        ON CONFLICT (id) DO NOTHING
        RETURNING id
    )
    SELECT array_agg(b.ord::integer)
    FROM stored s JOIN unnest(p_ids) WITH ORDINALITY AS b(id, ord) ON b.id = s.id
    INTO v_stored;
    v_stored := COALESCE(v_stored, '{}');
    -- The jobs publish() stored move to their places (an id twice: the last one wins).
    FOR i IN SELECT g FROM generate_series(1, v_n) g WHERE v_takes[g] AND NOT v_plain[g]
             ORDER BY g LOOP
        UPDATE jobs SET score = p_priorities[i]::bigint * priority_factor() + v_place[i]
        WHERE id = p_ids[i]
          AND score <> p_priorities[i]::bigint * priority_factor() + v_place[i];
    END LOOP;
    -- Their wake-ups: one per queue (pg_notify folds equal ones within a transaction anyway).
    FOR v_queue IN SELECT DISTINCT p_queues[k] FROM unnest(v_stored) k LOOP
        PERFORM wake(v_queue);
    END LOOP;
    RETURN QUERY SELECT k, NULL::text,
                        CASE WHEN p_etas[k] > v_now THEN 'scheduled' ELSE 'enqueued' END,
                        false, false
                 FROM unnest(v_stored) k;
    -- A plain job whose id another publisher stored meanwhile: publish() replaces that job,
    -- and the job keeps the place taken for it (publish()'s own number is left unused).
    FOR i IN SELECT g FROM generate_series(1, v_n) g LEFT JOIN unnest(v_stored) s(k) ON s.k = g
             WHERE s.k IS NULL AND v_plain[g] ORDER BY g LOOP
        o_ord := i;
        SELECT p.o_holder, p.o_state, p.o_continued, p.o_fenced
        INTO o_holder, o_state, o_continued, o_fenced
        FROM publish(p_ids[i], p_queues[i], p_msgs[i], p_names[i], p_priorities[i],
                     p_etas[i], p_locks[i], p_windows[i], p_ttls[i], p_groups[i],
                     p_limits[i], p_mdls[i], p_backstop, p_continues[i], p_rate_groups[i],
                     p_rate_limits[i], p_rate_windows[i]) p;
        IF o_holder IS NULL AND NOT o_fenced THEN
            UPDATE jobs SET score = p_priorities[i]::bigint * priority_factor() + v_place[i]
            WHERE id = p_ids[i];
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
