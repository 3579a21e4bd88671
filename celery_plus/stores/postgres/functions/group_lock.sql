-- The advisory lock of a concurrency group, held until the transaction ends.
CREATE OR REPLACE FUNCTION group_lock(p_group text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema()), hashtext(p_group));
END
$$;
