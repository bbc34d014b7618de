-- Queued steps: a job is a step waiting for (or held by) a step worker; its row is deleted
-- when its step ends.

-- Write the start of a queued attempt (p_ops) if p_owner still holds the job and the run
-- is running. A suspended or paused run's job is released (kept for when it goes on;
-- claims skip it);
-- the job of a run that ended or is gone is deleted. False when nothing was written.
CREATE OR REPLACE FUNCTION @schema@.begin_queued_step(
    p_run text, p_key text, p_owner text, p_ops @schema@.op[], p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    run_status text;
BEGIN
    -- the run row first (the order every writer of this run follows), shared: steps of
    -- one run may begin side by side
    SELECT status INTO run_status FROM @schema@.runs WHERE id = p_run FOR SHARE;
    PERFORM 1 FROM @schema@.jobs
    WHERE run_id = p_run AND step_key = p_key AND lease_owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF run_status IN ('suspended', 'paused') THEN
        UPDATE @schema@.jobs SET lease_owner = NULL, lease_until = NULL
        WHERE run_id = p_run AND step_key = p_key;
        RETURN false;
    END IF;
    IF run_status IS DISTINCT FROM 'running' THEN
        DELETE FROM @schema@.jobs WHERE run_id = p_run AND step_key = p_key;
        RETURN false;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    RETURN true;
END $$;

-- Record the outcome of a queued step and wake its run, if the job is still ours.
CREATE OR REPLACE FUNCTION @schema@.finish_queued_step(
    p_run text, p_key text, p_owner text, p_ops @schema@.op[], p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM @schema@.runs WHERE id = p_run FOR UPDATE;
    DELETE FROM @schema@.jobs
    WHERE run_id = p_run AND step_key = p_key AND lease_owner = p_owner;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
    RETURN true;
END $$;
