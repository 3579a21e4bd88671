-- celery-plus durable store on PostgreSQL, migration 0004: fenced retries (continuation), tokens unique
-- per id forever, holds that live as long as their job needs them, keys of any size, settles
-- that no failure detail can abort (issue #11, defects 1, 2, 6, 7, 10, 14).
--
-- * tokens        a sequence: every claim's lease token comes from it, so an id published again
--                 after its record was pruned or purged never gets a token an old delivery
--                 could still carry. It starts above every token already issued.
-- * store_key()   a unique key or concurrency group as stored: itself when at most 512 bytes,
--                 else its first 128 characters and the SHA-256 of the whole (a btree index
--                 entry cannot hold a megabyte; the same text always gives the same key).
-- * publish()     (new signature: + p_continues, OUT o_fenced) a continuation must carry the
--                 running claim's lease token; a publish of a running id without it, or a
--                 continuation whose claim is no longer current, changes nothing (fenced). A
--                 message with another key than its job's releases the old key; a non-TTL hold
--                 is taken until due time + backstop. The 13-argument publish() of 0001 stays
--                 for processes of earlier versions during a rolling upgrade.
-- * settle()      details decoded with safe_jsonb(): a detail that is not JSON is a note,
--                 never an error that aborts the batch.
-- * jobs_token    a trigger: whenever claim() or claim_job() give a job a new token (its
--                 previous token + 1, as in 0001/0003), the token is taken from `tokens` instead.
-- * renew_holds() called by maintenance: holds lapsing within half a backstop whose job still
--                 waits or runs get another backstop.
--
-- (Schema only: the functions named above are in ../functions/, in their current version.)

CREATE SEQUENCE tokens;
SELECT setval('tokens', COALESCE((SELECT max(token) FROM jobs), 0) + 1, false);
