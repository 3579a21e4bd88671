-- Remove a binding (and its deadline).
CREATE OR REPLACE FUNCTION unbind(p_exchange text, p_binding text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM bindings WHERE exchange = p_exchange AND binding = p_binding;
    DELETE FROM binding_deadlines WHERE exchange = p_exchange AND binding = p_binding;
END
$$;
