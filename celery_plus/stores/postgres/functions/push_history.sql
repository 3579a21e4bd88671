-- Append an attempt to the job's history, keeping the last history_max().
CREATE OR REPLACE FUNCTION push_history(p_id text, p_entry jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_hist jsonb;
BEGIN
    SELECT j.history INTO v_hist FROM jobs j WHERE j.id = p_id;
    IF v_hist IS NULL OR jsonb_typeof(v_hist) <> 'array' THEN
        v_hist := '[]'::jsonb;
    END IF;
    v_hist := v_hist || jsonb_build_array(p_entry);
    IF jsonb_array_length(v_hist) > history_max() THEN
        SELECT jsonb_agg(e.value ORDER BY e.ordinality) INTO v_hist
        FROM jsonb_array_elements(v_hist) WITH ORDINALITY AS e
        WHERE e.ordinality > jsonb_array_length(v_hist) - history_max();
    END IF;
    UPDATE jobs SET history = v_hist WHERE id = p_id;
END
$$;
