-- A detail value as Redis stores it with HSET ('' for absent / null / false).
CREATE OR REPLACE FUNCTION jtext(p_detail jsonb, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_detail IS NULL OR jsonb_typeof(p_detail) <> 'object' THEN ''
        WHEN NOT (p_detail ? p_key) THEN ''
        WHEN jsonb_typeof(p_detail -> p_key) = 'null' THEN ''
        WHEN p_detail -> p_key = 'false'::jsonb THEN ''
        ELSE p_detail ->> p_key
    END
$$;
