-- Lease tokens come from the `tokens` sequence: whenever claim() or claim_job() give a job a
-- new token (its previous token + 1), the trigger jobs_token takes it from the sequence
-- instead, so an id published again after its record was pruned or purged never gets a token
-- an old delivery could still carry.
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
