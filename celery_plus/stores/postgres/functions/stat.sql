-- One increment of counter `p_name` (maintain() folds them).
CREATE OR REPLACE FUNCTION stat(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stats (name, n) VALUES (p_name, 1);
END
$$;
