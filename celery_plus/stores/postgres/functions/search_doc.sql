-- A job's search document, as model/admin.py search_document builds it: each non-empty value
-- of id, task name, the envelope's argsrepr and kwargsrepr headers, error type, message,
-- reason and traceback, followed by a newline. A message that is not a JSON envelope adds no
-- arguments.
CREATE OR REPLACE FUNCTION search_doc(p_id text, p_name text, p_msg bytea, p_etype text,
                                      p_emsg text, p_reason text, p_tb text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_headers jsonb;
    v_reprs text := '';
BEGIN
    BEGIN
        v_headers := convert_from(p_msg, 'UTF8')::jsonb -> 'headers';
    EXCEPTION WHEN others THEN
        v_headers := NULL;
    END;
    IF jsonb_typeof(v_headers) = 'object' THEN
        v_reprs := concat(
            CASE WHEN jsonb_typeof(v_headers -> 'argsrepr') = 'string'
                 THEN nullif(v_headers ->> 'argsrepr', '') || E'\n' END,
            CASE WHEN jsonb_typeof(v_headers -> 'kwargsrepr') = 'string'
                 THEN nullif(v_headers ->> 'kwargsrepr', '') || E'\n' END);
    END IF;
    RETURN concat(nullif(p_id, '') || E'\n', nullif(p_name, '') || E'\n', v_reprs,
                  nullif(p_etype, '') || E'\n', nullif(p_emsg, '') || E'\n',
                  nullif(p_reason, '') || E'\n', nullif(p_tb, '') || E'\n');
END
$$;

-- Keeps job_search (migration 0009) as jobs are written: a publish, a dead letter, a delete.
CREATE OR REPLACE FUNCTION job_search_row() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM job_search WHERE id = OLD.id;
        RETURN NULL;
    END IF;
    INSERT INTO job_search (id, doc)
    VALUES (NEW.id, search_doc(NEW.id, NEW.name, NEW.msg, NEW.exc_type, NEW.exc_message,
                               NEW.reason, NEW.traceback))
    ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc;
    RETURN NULL;
END
$$;

-- Claims, heartbeats and settles name none of the document's columns: they fire neither.
-- DROP + CREATE rather than CREATE OR REPLACE TRIGGER (PostgreSQL 14+ only).
DROP TRIGGER IF EXISTS jobs_search ON jobs;
CREATE TRIGGER jobs_search AFTER INSERT OR DELETE ON jobs
FOR EACH ROW EXECUTE FUNCTION job_search_row();
DROP TRIGGER IF EXISTS jobs_search_update ON jobs;
CREATE TRIGGER jobs_search_update
AFTER UPDATE OF name, msg, exc_type, exc_message, reason, traceback ON jobs
FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.msg IS DISTINCT FROM NEW.msg
                   OR OLD.exc_type IS DISTINCT FROM NEW.exc_type
                   OR OLD.exc_message IS DISTINCT FROM NEW.exc_message
                   OR OLD.reason IS DISTINCT FROM NEW.reason
                   OR OLD.traceback IS DISTINCT FROM NEW.traceback)
EXECUTE FUNCTION job_search_row();

-- A store made before the index: every job indexed once, while the triggers' lock keeps
-- writers out (job_search is empty only before this first run, or in an empty store).
INSERT INTO job_search (id, doc)
SELECT id, search_doc(id, name, msg, exc_type, exc_message, reason, traceback) FROM jobs
WHERE NOT EXISTS (SELECT 1 FROM job_search)
ON CONFLICT (id) DO NOTHING;
