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
-- DROP + CREATE rather than CREATE OR REPLACE TRIGGER (PostgreSQL 14+ only).
DROP TRIGGER IF EXISTS jobs_token ON jobs;
CREATE TRIGGER jobs_token BEFORE UPDATE OF token ON jobs
FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token) EXECUTE FUNCTION next_token();

-- With the trigger's lock held (no claim can run until this batch commits), the sequence is
-- moved past every token issued so far: a process of an earlier version that claimed between
-- the migration creating the sequence and this batch issued token + 1 without it.
SELECT setval('tokens', m) FROM (SELECT COALESCE(max(token), 0) AS m FROM jobs) issued
WHERE m > (SELECT last_value FROM tokens);
