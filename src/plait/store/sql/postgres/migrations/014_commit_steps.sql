-- plait schema for PostgreSQL, version 14: a lone batch of step writes committed by a
-- function that only fences and writes.
-- description: commit_steps, the lone commit of step writes (every sequential step), with no loop over its ops
--
-- A run with one step going at a time commits alone, one batch per step: the end of one
-- attempt and the start of the next. Through try_commit_batch that batch first went op by
-- op in PL/pgSQL, deciding it held step writes only; the loop cost the server more than
-- the writes. The store decides that before it sends the batch, so this function takes
-- the run's lock under the lease and writes the steps with apply_step_ops, nothing else.
-- False, with nothing written, when p_fence no longer holds the lease.
CREATE FUNCTION @schema@.commit_steps(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND lease_owner = p_fence FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM @schema@.apply_step_ops(p_ops, NULL, p_now);
    RETURN true;
END $$;
