-- plait schema for PostgreSQL, version 17: a cancel takes queued children with it.
-- description: a cancelled run's children that wait for their queue are cancelled too
--
-- A child run of a workflow declared on a queue waits for admission like any other run of
-- the queue (status queued). The cascade of a cancel ended only running and suspended
-- children, from the time no child could be queued: a queued child of a cancelled parent
-- would still be admitted later and run. end_run as version 2 wrote it, but for the
-- statuses of the cascade.
CREATE OR REPLACE FUNCTION @schema@.end_run(
    p_run text, p_status text, p_output jsonb, p_error jsonb, p_parent @schema@.step_end,
    p_now timestamptz, p_from text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
    parent_key text;
    children text[];
    child text;
    moved text[];
BEGIN
    UPDATE @schema@.runs SET status = p_status, output = p_output, error = p_error,
        updated_at = p_now, wake_at = NULL
    WHERE id = p_run AND status = ANY (p_from)
    RETURNING parent_run_id, parent_step_key INTO parent, parent_key;
    IF NOT FOUND THEN
        RETURN ARRAY[]::text[];
    END IF;
    moved := ARRAY[p_run];
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    IF p_status = 'suspended' THEN
        RETURN moved;
    END IF;
    DELETE FROM @schema@.timers WHERE run_id = p_run;
    DELETE FROM @schema@.jobs WHERE run_id = p_run;
    IF p_status = 'cancelled' THEN
        SELECT array_agg(id ORDER BY id) INTO children FROM @schema@.runs
        WHERE parent_run_id = p_run AND status IN ('running', 'suspended', 'queued');
        FOREACH child IN ARRAY coalesce(children, ARRAY[]::text[]) LOOP
            moved := moved || @schema@.end_run(child, p_status, NULL, p_error, p_parent,
                                               p_now, ARRAY['running', 'suspended', 'queued']);
        END LOOP;
    END IF;
    IF (p_parent).status IS NOT NULL AND coalesce(parent, '') <> ''
            AND coalesce(parent_key, '') <> '' THEN
        PERFORM @schema@.settle_parent_step(parent, parent_key, p_run, p_parent, p_now);
    END IF;
    RETURN moved;
END $$;
