-- A settle's detail as jsonb: NULL for none, a note for text that is not a JSON object.
CREATE OR REPLACE FUNCTION safe_jsonb(p_text text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_detail jsonb;
BEGIN
    IF p_text IS NULL OR p_text = '' THEN
        RETURN NULL;
    END IF;
    BEGIN
        v_detail := p_text::jsonb;
    EXCEPTION WHEN others THEN
        v_detail := NULL;
    END;
    IF v_detail IS NULL OR jsonb_typeof(v_detail) <> 'object' THEN
        RETURN jsonb_build_object('exc_message', 'failure details could not be decoded');
    END IF;
    RETURN v_detail;
END
$$;
