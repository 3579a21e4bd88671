-- The rules' constants (celery_plus/model/rules.py's RENDERED), never retyped in SQL: the
-- applier (migrations.render_rules) renders each name in double braces below from rules.py
-- before the file is hashed, so a changed constant changes this file's hash and the file is
-- applied again.
-- IMMUTABLE SQL functions: a caller's plan gets the value folded in as a constant.

-- Ordering: score = priority * priority_factor() + seq (lower first; equal priorities FIFO).
CREATE OR REPLACE FUNCTION priority_factor() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {{PRIORITY_FACTOR}}::bigint $$;

-- Attempts kept in a job's history.
CREATE OR REPLACE FUNCTION history_max() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {{HISTORY_MAX}}::integer $$;

-- How long a job given back by settle's 'defer' after its p_deliveries-th delivery waits:
-- DEFER_BASE_MS doubled per delivery after the first, at most DEFER_MAX_MS (rules.defer_ms).
CREATE OR REPLACE FUNCTION defer_ms(p_deliveries integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least({{DEFER_BASE_MS}}::bigint * (1::bigint << least(greatest(p_deliveries - 1, 0), 30)),
                 {{DEFER_MAX_MS}}::bigint)
$$;

-- States in which a job waits for a worker.
CREATE OR REPLACE FUNCTION waiting_states() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {{WAITING}}::text[] $$;

-- States of a job that has ended: a publish of its id starts it anew.
CREATE OR REPLACE FUNCTION finished_states() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {{FINISHED}}::text[] $$;

-- All of them by their name in rules.py (for a look at a schema: SELECT rules()).
CREATE OR REPLACE FUNCTION rules() RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('PRIORITY_FACTOR', {{PRIORITY_FACTOR}}::bigint,
                              'HISTORY_MAX', {{HISTORY_MAX}}::integer,
                              'DEFER_BASE_MS', {{DEFER_BASE_MS}}::bigint,
                              'DEFER_MAX_MS', {{DEFER_MAX_MS}}::bigint,
                              'WAITING', to_jsonb({{WAITING}}::text[]),
                              'FINISHED', to_jsonb({{FINISHED}}::text[]))
$$;
