CREATE OR REPLACE FUNCTION next_token() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    NEW.token := nextval('tokens');
    RETURN NEW;
END
$$;

-- Fires only on the updates that issue a token (a claim), never on the others of a job.
CREATE OR REPLACE TRIGGER jobs_token BEFORE UPDATE OF token ON jobs
FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token) EXECUTE FUNCTION next_token();
