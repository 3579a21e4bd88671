-- group_lock() unless another transaction holds it: false then.
CREATE OR REPLACE FUNCTION group_try_lock(p_group text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN pg_try_advisory_xact_lock(hashtext(current_schema()), hashtext(p_group));
END
$$;
