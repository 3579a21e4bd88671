-- Slot.TAKE (model/rules.py): a slot of concurrency group `p_group` (`p_limit` at once) for
-- `p_id`; the caller holds the group's advisory lock. True when taken, or the job has no
-- group. False when the group is full (counted as 'blocked'); with p_park the job is then
-- parked: blocked, keeping its score (its place in line) until a slot is freed (free_slot).
-- Without p_park nothing else changes (the caller reports it).
CREATE OR REPLACE FUNCTION take_slot(p_id text, p_group text, p_limit integer, p_park boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_group IS NULL OR p_group = '' THEN
        RETURN true;
    END IF;
    IF (SELECT count(*) FROM slots s WHERE s.conc_group = p_group) >= p_limit THEN
        IF p_park THEN
            UPDATE jobs SET state = 'blocked', rate_parked = false WHERE id = p_id;
        END IF;
        PERFORM stat('blocked');
        RETURN false;
    END IF;
    INSERT INTO slots (conc_group, job_id) VALUES (p_group, p_id) ON CONFLICT DO NOTHING;
    RETURN true;
END
$$;
