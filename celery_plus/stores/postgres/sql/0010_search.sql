-- celery-plus durable store on PostgreSQL, migration 0009: an index for the admin's text search.
--
-- * job_search      one row per job: its search document (model/admin.py search_document:
--                   id, task name, argsrepr, kwargsrepr, error type, message, reason and
--                   traceback), kept by the trigger jobs_search (functions/search_doc.sql).
-- * job_search_trgm a pg_trgm GIN index on the document, so that a substring (ILIKE) search
--                   reads the matching rows only. pg_trgm is created in schema public when it
--                   can be (a trusted extension: a database owner may); when it cannot, the
--                   store has no such index and the admin's text searches read their
--                   candidates, a bounded window (docs/admin.md). Installing pg_trgm later and
--                   creating the index by hand (the statement below) turns the index on.
--
-- (Schema only: the functions named above are in ../functions/, in their current version.)

CREATE TABLE IF NOT EXISTS job_search (
    id  text PRIMARY KEY,
    doc text NOT NULL
);

DO $$
DECLARE
    v_schema text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
        EXCEPTION WHEN others THEN
            RAISE NOTICE 'pg_trgm is not available (%): text searches read their candidates',
                SQLERRM;
        END;
    END IF;
    SELECT n.nspname INTO v_schema FROM pg_extension e
    JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF v_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS job_search_trgm ON job_search '
                       'USING gin (doc %I.gin_trgm_ops)', v_schema);
    END IF;
END
$$;
