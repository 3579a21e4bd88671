-- The advisory lock key of a rate group (apart from the concurrency groups' keys).
CREATE OR REPLACE FUNCTION rate_key(p_group text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'rate|' || p_group $$;
