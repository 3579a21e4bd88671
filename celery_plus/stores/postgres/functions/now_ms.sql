-- Milliseconds since the epoch, from the database clock.
CREATE OR REPLACE FUNCTION now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;
