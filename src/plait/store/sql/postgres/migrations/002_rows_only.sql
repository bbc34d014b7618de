-- plait schema for PostgreSQL, version 2: the functions only move rows.
-- description: the runtime decides every step's status; the functions only move rows
--
-- Version 1's functions held part of the step state machine: they built the error of a
-- parent step whose child failed, gave up a queued step interrupted too often, and
-- reopened the steps of a resumed or retried run. That is decided once, in Python
-- (plait.runtime.steps), for both stores; these functions now receive its result as rows
-- and records (ops, a step_end) and write them where they belong, still one statement and
-- one round trip per store call.

-- How a parent's step ends when its child run ends (plait.store.base.StepEnd).
CREATE TYPE @schema@.step_end AS (
    status text,        -- succeeded | failed
    output jsonb,
    error  jsonb
);

-- An end_run op carries the end of the parent's step that waits for the run.
ALTER TYPE @schema@.op ADD ATTRIBUTE parent @schema@.step_end;

-- Replaced below with signatures that take the decision as data, or gone: a resume or a
-- retry is a reopen_run with the ops the runtime decided.
DROP FUNCTION @schema@.retry_run(text, timestamptz);
DROP FUNCTION @schema@.resume_run(text, timestamptz);
DROP FUNCTION @schema@.requeue(text, timestamptz);
DROP FUNCTION @schema@.begin_queued_step(text, text, text, text, timestamptz);
DROP FUNCTION @schema@.cancel_run(text, jsonb, timestamptz);
DROP FUNCTION @schema@.end_run(text, text, jsonb, jsonb, timestamptz, text[]);
DROP FUNCTION @schema@.settle_parent_step(text, text, text, text, jsonb, jsonb, timestamptz);

-- A child run ended: the parent's step that still waits for it (it names this child and
-- is running) ends as p_end says, its attempt closes with it, and the parent is woken.
CREATE FUNCTION @schema@.settle_parent_step(
    p_parent text, p_key text, p_child text, p_end @schema@.step_end, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
BEGIN
    UPDATE @schema@.steps SET status = p_end.status, output = p_end.output,
        error = p_end.error,
        failures = failures + CASE WHEN p_end.status = 'failed' THEN 1 ELSE 0 END,
        updated_at = p_now
    WHERE run_id = p_parent AND key = p_key AND child_run_id = p_child
        AND status = 'running'
    RETURNING attempts INTO v_attempt;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM @schema@.close_attempt(p_parent, p_key, v_attempt, p_end.status,
        CASE WHEN p_end.status = 'succeeded' THEN p_end.output END,
        CASE WHEN p_end.status = 'failed' THEN p_end.error END, p_now);
    PERFORM @schema@.wake_run(p_parent, p_now, p_now);
END $$;

-- Move a run to p_status if it is in p_from (the terminal guard); returns every run that
-- moved (a cancel cascades to the children, parents before children, which is also the
-- order in which rows are locked). A terminal end settles the parent's waiting step as
-- p_parent says (NULL: it settles nothing); every run a cancel ends gets the same p_error
-- and p_parent.
CREATE FUNCTION @schema@.end_run(
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
        WHERE parent_run_id = p_run AND status IN ('running', 'suspended');
        FOREACH child IN ARRAY coalesce(children, ARRAY[]::text[]) LOOP
            moved := moved || @schema@.end_run(child, p_status, NULL, p_error, p_parent,
                                               p_now, ARRAY['running', 'suspended']);
        END LOOP;
    END IF;
    IF (p_parent).status IS NOT NULL AND coalesce(parent, '') <> ''
            AND coalesce(parent_key, '') <> '' THEN
        PERFORM @schema@.settle_parent_step(parent, parent_key, p_run, p_parent, p_now);
    END IF;
    RETURN moved;
END $$;

-- Apply the writes of a pass in order. SQLSTATE PLT01: an event was consumed by another
-- pass (the whole statement rolls back, like a lost lease).
CREATE OR REPLACE FUNCTION @schema@.apply_ops(
    p_run text, p_ops @schema@.op[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
BEGIN
    FOREACH o IN ARRAY p_ops LOOP
        CASE o.kind
        WHEN 'put_step' THEN
            PERFORM @schema@.put_step(o.step);
        WHEN 'start_attempt' THEN
            PERFORM @schema@.put_step(o.step);
            PERFORM @schema@.open_attempt((o.step).run_id, (o.step).key, o.attempt, o.worker,
                                          p_now);
        WHEN 'finish_attempt' THEN
            PERFORM @schema@.put_step(o.step);
            PERFORM @schema@.close_attempt((o.step).run_id, (o.step).key, o.attempt, o.status,
                                           o.output, o.error, p_now);
        WHEN 'set_timer' THEN
            INSERT INTO @schema@.timers (run_id, step_key, purpose, wake_at)
            VALUES (p_run, o.key, o.purpose, o.at)
            ON CONFLICT (run_id, step_key) DO UPDATE SET purpose = excluded.purpose,
                wake_at = excluded.wake_at;
        WHEN 'clear_timer' THEN
            DELETE FROM @schema@.timers WHERE run_id = p_run AND step_key = o.key;
        WHEN 'enqueue_job' THEN
            INSERT INTO @schema@.jobs (run_id, step_key, function, available_at, created_at)
            VALUES (p_run, o.key, o.function, o.at, p_now)
            ON CONFLICT (run_id, step_key) DO UPDATE SET function = excluded.function,
                available_at = excluded.available_at, lease_owner = NULL, lease_until = NULL;
            PERFORM pg_notify(@channel@, 'work');
        WHEN 'consume_event' THEN
            UPDATE @schema@.events SET consumed_by = o.key
            WHERE id = o.event_id AND consumed_by IS NULL;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'event % was consumed by another pass', o.event_id
                    USING ERRCODE = 'PLT01';
            END IF;
        WHEN 'create_child_run' THEN
            PERFORM @schema@.insert_run(o.run, p_now);
        WHEN 'set_state' THEN
            INSERT INTO @schema@.state (run_id, name, value) VALUES (p_run, o.name, o.output)
            ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value;
        WHEN 'end_run' THEN
            PERFORM @schema@.end_run(p_run, o.status, o.output, o.error, o.parent, p_now,
                                     ARRAY['running']);
        ELSE
            RAISE EXCEPTION 'unknown store operation %', o.kind;
        END CASE;
    END LOOP;
END $$;

-- Write the start of a queued attempt (p_ops) if p_owner still holds the job and the run
-- is running. A suspended run's job is released (kept for its resume; claims skip it);
-- the job of a run that ended or is gone is deleted. False when nothing was written.
CREATE FUNCTION @schema@.begin_queued_step(
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
    IF run_status = 'suspended' THEN
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

CREATE FUNCTION @schema@.cancel_run(
    p_run text, p_error jsonb, p_parent @schema@.step_end, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended']);
    RETURN @schema@.end_run(p_run, 'cancelled', NULL, p_error, p_parent, p_now,
                            ARRAY['running', 'suspended']);
END $$;

-- A suspended or failed run goes on (resume, retry): if it is still p_from with p_seen
-- wake-ups, write p_ops (the steps the runtime reopened) and make it running and due now.
-- No row when it changed since the caller read it (nothing is written then).
CREATE FUNCTION @schema@.reopen_run(
    p_run text, p_from text, p_seen bigint, p_ops @schema@.op[], p_now timestamptz
) RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY[p_from]);
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND wakeups = p_seen;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    UPDATE @schema@.runs SET status = 'running', error = NULL, output = NULL,
        updated_at = p_now, wake_at = p_now, wakeups = wakeups + 1
    WHERE id = p_run;
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;
