-- A unique key or concurrency group as stored: itself when at most 512 bytes, else its first
-- 128 characters and the SHA-256 of the whole (a btree index entry cannot hold a megabyte; the
-- same text always gives the same key).
CREATE OR REPLACE FUNCTION store_key(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_key IS NULL OR octet_length(p_key) <= 512 THEN p_key
                ELSE left(p_key, 128) || ' sha256:'
                     || encode(sha256(convert_to(p_key, 'UTF8')), 'hex') END
$$;
