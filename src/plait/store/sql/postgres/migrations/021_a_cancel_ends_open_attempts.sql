-- plait schema for PostgreSQL, version 21: a cancel ends the attempts left open.
-- description: a cancelled run's attempts still running end cancelled with it
--
-- A worker that dies inside a step leaves the step's attempt running, to be found by the
-- next pass of the run. A run cancelled meanwhile has no next pass, so its step showed as
-- running for ever. Now the cancel ends each attempt still open, in the run and in every
-- child it cancels, as steps.interrupt ends one that its pass saw cancelled: the step
-- failed, the attempt cancelled, with the cancel's error; a step running with no attempt
-- open (a for_each node waiting for its items) fails with it. A pass still at work on the
-- run writes over it how its step really ended (but not an interruption: see version
-- 20). end_run as version 17 wrote it, but for that.
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
        UPDATE @schema@.steps SET status = 'failed', error = p_error,
            attempt_status = CASE WHEN attempt_status = 'running' THEN 'cancelled'
                ELSE attempt_status END,
            attempt_error = CASE WHEN attempt_status = 'running' THEN p_error
                ELSE attempt_error END,
            attempt_finished = CASE WHEN attempt_status = 'running' THEN p_now
                ELSE attempt_finished END,
            updated_at = p_now
        WHERE run_id = p_run AND (attempt_status = 'running' OR status = 'running');
    END IF;
    IF (p_parent).status IS NOT NULL AND coalesce(parent, '') <> ''
            AND coalesce(parent_key, '') <> '' THEN
        PERFORM @schema@.settle_parent_step(parent, parent_key, p_run, p_parent, p_now);
    END IF;
    RETURN moved;
END $$;
