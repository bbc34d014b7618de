-- plait schema for PostgreSQL, version 13: a step's latest attempt on its step row, and the
-- step writes of a batch, or of a whole group, as one statement.
-- description: a step's latest attempt on its step row; step writes set-based, one statement for a whole group
--
-- Most batches hold only step writes (the end of one attempt and the start of the next).
-- Written op by op, each cost a nested function call and a statement of its own, and
-- every attempt a row of its own in attempts (an insert at its start, an update at its
-- end), all on the one backend that commits a process's groups. Now a step's latest
-- attempt lives on its step row (as on SQLite since its version 2): attempts keeps the
-- earlier ones, an attempt moving there when the next one starts. A group of a hundred
-- such batches costs one statement to lock and fence their runs and one to write their
-- steps and attempts. Batches with any other op are written op by op, as before.

-- New columns go last: the steps row type is StepRow's fields, then these (the store
-- sends them empty, and reads only StepRow's fields back).
ALTER TABLE @schema@.steps ADD COLUMN worker text;
ALTER TABLE @schema@.steps ADD COLUMN attempt_status text;     -- NULL: no attempt on the row
ALTER TABLE @schema@.steps ADD COLUMN attempt_error jsonb;
ALTER TABLE @schema@.steps ADD COLUMN attempt_started timestamptz;
ALTER TABLE @schema@.steps ADD COLUMN attempt_finished timestamptz;

-- the latest attempt of every step recorded so far moves onto its step row
UPDATE @schema@.steps AS s SET worker = a.worker, attempt_status = a.status,
    attempt_error = a.error, attempt_started = a.started_at, attempt_finished = a.finished_at
FROM @schema@.attempts AS a
WHERE a.run_id = s.run_id AND a.key = s.key AND a.attempt = s.attempts;

DELETE FROM @schema@.attempts AS a USING @schema@.steps AS s
WHERE s.run_id = a.run_id AND s.key = a.key AND s.attempts = a.attempt
    AND s.attempt_status IS NOT NULL;

-- An attempt starts on the step row (already written with the new attempt count); the
-- attempt the row held until now, if any, moves to attempts.
CREATE OR REPLACE FUNCTION @schema@.open_attempt(
    p_run text, p_key text, p_attempt integer, p_worker text, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_attempt > 1 THEN
        INSERT INTO @schema@.attempts (run_id, key, attempt, status, output, error, worker,
            started_at, finished_at)
        SELECT run_id, key, p_attempt - 1, attempt_status,
            CASE WHEN attempt_status = 'succeeded' THEN output END, attempt_error, worker,
            attempt_started, attempt_finished
        FROM @schema@.steps
        WHERE run_id = p_run AND key = p_key AND attempt_status IS NOT NULL
        ON CONFLICT (run_id, key, attempt) DO UPDATE SET status = excluded.status,
            output = excluded.output, error = excluded.error, worker = excluded.worker,
            started_at = excluded.started_at, finished_at = excluded.finished_at;
    END IF;
    UPDATE @schema@.steps SET worker = p_worker, attempt_status = 'running',
        attempt_error = NULL, attempt_started = p_now, attempt_finished = NULL
    WHERE run_id = p_run AND key = p_key;
END $$;

-- An attempt ends: the one on the step row (the step's latest: an attempt ends before the
-- next starts, and the step row may already count the next, written in the same batch).
-- The attempt's output is the step's (a success's result).
CREATE OR REPLACE FUNCTION @schema@.close_attempt(
    p_run text, p_key text, p_attempt integer, p_status text, p_output jsonb,
    p_error jsonb, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.steps SET attempt_status = p_status, attempt_error = p_error,
        attempt_finished = p_now
    WHERE run_id = p_run AND key = p_key AND attempt_status IS NOT NULL;
    IF NOT FOUND THEN
        UPDATE @schema@.attempts SET status = p_status, output = p_output, error = p_error,
            finished_at = p_now
        WHERE run_id = p_run AND key = p_key AND attempt = p_attempt;
    END IF;
END $$;

-- The step writes (put_step, start_attempt, finish_attempt) among p_ops for which
-- p_take[k] is true (every one when p_take is NULL), as one statement: each step at most
-- once among them (the caller's promise). A step row is written as put_step (version 3)
-- writes it; the attempt on it as open_attempt and close_attempt do, the attempt it held
-- moving to attempts when the next starts. On insert and in ``excluded``,
-- attempt_status says what the op does to the attempt: NULL nothing (put_step),
-- 'running' start it, any other status end it.
CREATE FUNCTION @schema@.apply_step_ops(
    p_ops @schema@.op[], p_take boolean[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    WITH archived AS (
        INSERT INTO @schema@.attempts (run_id, key, attempt, status, output, error, worker,
            started_at, finished_at)
        SELECT s.run_id, s.key, u.attempt - 1, s.attempt_status,
            CASE WHEN s.attempt_status = 'succeeded' THEN s.output END, s.attempt_error,
            s.worker, s.attempt_started, s.attempt_finished
        FROM unnest(p_ops) WITH ORDINALITY AS u
        JOIN @schema@.steps AS s ON s.run_id = (u.step).run_id AND s.key = (u.step).key
        WHERE u.kind = 'start_attempt' AND u.attempt > 1
            AND (p_take IS NULL OR p_take[u.ordinality]) AND s.attempt_status IS NOT NULL
        ON CONFLICT (run_id, key, attempt) DO UPDATE SET status = excluded.status,
            output = excluded.output, error = excluded.error, worker = excluded.worker,
            started_at = excluded.started_at, finished_at = excluded.finished_at
    )
    INSERT INTO @schema@.steps (run_id, key, seq, name, kind, function, status, input, output,
        error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
        branch, from_key, queued, wake_at, created_at, updated_at, delivered,
        retried_failures, reached_after, worker, attempt_status, attempt_error,
        attempt_started, attempt_finished)
    SELECT (u.step).run_id, (u.step).key, (u.step).seq, (u.step).name, (u.step).kind,
        (u.step).function, (u.step).status, (u.step).input, (u.step).output,
        (u.step).error, (u.step).attempts, (u.step).failures, (u.step).retries,
        (u.step).retry_delay, (u.step).timeout, (u.step).invocation_id,
        (u.step).child_run_id, (u.step).branch, (u.step).from_key, (u.step).queued,
        (u.step).wake_at, (u.step).created_at, (u.step).updated_at, (u.step).delivered,
        (u.step).retried_failures, (u.step).reached_after,
        CASE u.kind WHEN 'start_attempt' THEN u.worker END,
        CASE u.kind WHEN 'start_attempt' THEN 'running' WHEN 'finish_attempt' THEN u.status
        END,
        CASE u.kind WHEN 'finish_attempt' THEN u.error END,
        CASE u.kind WHEN 'start_attempt' THEN p_now END,
        CASE u.kind WHEN 'finish_attempt' THEN p_now END
    FROM unnest(p_ops) WITH ORDINALITY AS u
    WHERE p_take IS NULL OR p_take[u.ordinality]
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at, delivered = excluded.delivered,
        retried_failures = excluded.retried_failures,
        worker = CASE excluded.attempt_status WHEN 'running' THEN excluded.worker
            ELSE steps.worker END,
        attempt_status = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_status
            WHEN excluded.attempt_status = 'running' THEN 'running'
            WHEN steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_status END,
        attempt_error = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_error
            WHEN excluded.attempt_status = 'running' OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_error END,
        attempt_started = CASE excluded.attempt_status WHEN 'running'
            THEN excluded.attempt_started ELSE steps.attempt_started END,
        attempt_finished = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_finished
            WHEN excluded.attempt_status = 'running' OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_finished END;
END $$;

-- try_commit_batch as in version 5, with a batch of step writes only (each of its own
-- step of this run) written by apply_step_ops.
CREATE OR REPLACE FUNCTION @schema@.try_commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz, p_wait boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    parent text;
    holder text;
    v_status text;
    steps_only boolean := true;
    keys text[] := '{}';
BEGIN
    FOREACH o IN ARRAY p_ops LOOP
        IF o.kind NOT IN ('put_step', 'start_attempt', 'finish_attempt')
            OR (o.step).run_id IS DISTINCT FROM p_run OR (o.step).key = ANY (keys) THEN
            steps_only := false;
        ELSIF steps_only THEN
            keys := keys || (o.step).key;
        END IF;
        IF o.kind = 'end_run' AND p_fence IS NOT NULL THEN
            SELECT parent_run_id INTO parent FROM @schema@.runs WHERE id = p_run;
            IF parent IS NOT NULL THEN
                IF p_wait THEN
                    PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE;
                ELSE
                    PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        RETURN 'busy';
                    END IF;
                END IF;
            END IF;
            EXIT;
        END IF;
    END LOOP;
    IF p_fence IS NOT NULL THEN
        IF p_wait THEN
            SELECT lease_owner, status INTO holder, v_status
            FROM @schema@.runs WHERE id = p_run FOR UPDATE;
        ELSE
            SELECT lease_owner, status INTO holder, v_status
            FROM @schema@.runs WHERE id = p_run FOR UPDATE SKIP LOCKED;
            IF NOT FOUND AND EXISTS (SELECT 1 FROM @schema@.runs WHERE id = p_run) THEN
                RETURN 'busy';
            END IF;
        END IF;
        IF NOT FOUND OR holder IS DISTINCT FROM p_fence THEN
            RETURN 'lost';
        END IF;
        IF v_status IN ('completed', 'failed', 'cancelled') THEN
            p_ops := ARRAY(
                SELECT x FROM unnest(p_ops) AS x
                WHERE x.kind NOT IN ('create_child_run', 'set_timer', 'enqueue_job')
            );
        END IF;
    END IF;
    IF cardinality(p_ops) = 0 THEN
        RETURN 'done';
    ELSIF steps_only THEN
        PERFORM @schema@.apply_step_ops(p_ops, NULL, p_now);
    ELSE
        PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    END IF;
    RETURN 'done';
END $$;

-- commit_group as in version 5, with p_steps_only[i] true when batch i holds step writes
-- only, each of its own step of its run (the caller's promise, and each run in the group
-- at most once): those batches are
-- fenced with one statement that locks every one of their runs not locked elsewhere, and
-- written together by apply_step_ops. The others are committed one by one as before.
CREATE FUNCTION @schema@.commit_group(
    p_runs text[], p_fences text[], p_ends integer[], p_seen bigint[], p_steps_only boolean[],
    p_ops @schema@.op[], p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(array_length(p_runs, 1), 0);
    outcome text[] := array_fill(NULL::text, ARRAY[n]);
    take boolean[] := array_fill(false, ARRAY[coalesce(array_length(p_ops, 1), 0)]);
    taken boolean := false;
    held text[];
    holders text[];
    at integer;
    first integer;
BEGIN
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.lease_owner), '{}')
    INTO held, holders
    FROM (
        SELECT r.id, r.lease_owner FROM @schema@.runs AS r
        WHERE r.id = ANY (
            SELECT b.run FROM unnest(p_runs, p_steps_only) AS b(run, steps_only)
            WHERE b.steps_only
        )
        FOR UPDATE SKIP LOCKED
    ) AS l;
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN NOT p_steps_only[i];
        at := array_position(held, p_runs[i]);
        IF at IS NULL THEN
            outcome[i] := CASE
                WHEN EXISTS (SELECT 1 FROM @schema@.runs WHERE id = p_runs[i]) THEN 'busy'
                ELSE 'lost' END;
        ELSIF holders[at] IS DISTINCT FROM p_fences[i] THEN
            outcome[i] := 'lost';
        ELSE
            outcome[i] := 'done';
            first := CASE WHEN i = 1 THEN 1 ELSE p_ends[i - 1] + 1 END;
            FOR k IN first .. p_ends[i] LOOP
                take[k] := true;
                taken := true;
            END LOOP;
        END IF;
    END LOOP;
    IF taken THEN
        PERFORM @schema@.apply_step_ops(p_ops, take, p_now);
    END IF;
    FOR i IN 1 .. n LOOP
        IF NOT p_steps_only[i] THEN
            first := CASE WHEN i = 1 THEN 1 ELSE p_ends[i - 1] + 1 END;
            outcome[i] := @schema@.try_commit_batch(
                p_runs[i], p_fences[i], coalesce(p_ops[first:p_ends[i]], '{}'), p_now, false
            );
        END IF;
        IF outcome[i] = 'done' AND p_seen[i] IS NOT NULL
            AND @schema@.release_after_batch(p_runs[i], p_fences[i], p_now, p_seen[i]) THEN
            outcome[i] := 'due';
        END IF;
    END LOOP;
    RETURN outcome;
END $$;
