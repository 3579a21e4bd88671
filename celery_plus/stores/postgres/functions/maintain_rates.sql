-- Maintenance: every rate group with parked jobs is looked at again (a wake-up lost to
-- nothing else), then released as by a claim.
CREATE OR REPLACE FUNCTION maintain_rates(p_batch integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now bigint := now_ms();
BEGIN
    INSERT INTO rate_wake (rate_group, at_ms)
    SELECT DISTINCT j.rate_group, v_now FROM jobs j
    WHERE j.state = 'blocked' AND j.rate_parked LIMIT 50
    ON CONFLICT DO NOTHING;
    RETURN release_rate(v_now, p_batch);
END
$$;
