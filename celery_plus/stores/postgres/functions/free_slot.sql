-- Free `p_id`'s slot of group `p_group` and unblock the group's oldest blocked job.
CREATE OR REPLACE FUNCTION free_slot(p_group text, p_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_group IS NULL OR p_group = '' THEN
        RETURN;
    END IF;
    PERFORM group_lock(p_group);
    DELETE FROM slots WHERE conc_group = p_group AND job_id = p_id;
    IF FOUND THEN
        PERFORM unblock_one(p_group);
    END IF;
END
$$;
