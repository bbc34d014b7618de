-- The rows of a step and its attempts. A step's latest attempt lives on its step row;
-- attempts keeps the earlier ones, an attempt moving there when the next one starts.

-- Insert a step, or update the columns a later write of it changes (its place, name,
-- invocation, creation time and reached_after stay as first written; the attempt on the
-- row is open_attempt's and close_attempt's).
CREATE OR REPLACE FUNCTION @schema@.put_step(s @schema@.steps)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO @schema@.steps SELECT (s).*
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at, delivered = excluded.delivered,
        retried_failures = excluded.retried_failures;
END $$;

-- An attempt starts on the step row (already written with the new attempt count), its
-- status p_status; the attempt the row held until now, if any, moves to attempts.
CREATE OR REPLACE FUNCTION @schema@.open_attempt(
    p_run text, p_key text, p_attempt integer, p_status text, p_worker text,
    p_now timestamptz
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
    UPDATE @schema@.steps SET worker = p_worker, attempt_status = p_status,
        attempt_error = NULL, attempt_started = p_now, attempt_finished = NULL
    WHERE run_id = p_run AND key = p_key;
END $$;

-- An attempt ends: the one on the step row (the step's latest: an attempt ends before the
-- next starts, and the step row may already count the next, written in the same batch).
-- The attempt's output is the step's (a success's result).
CREATE OR REPLACE FUNCTION @schema@.close_attempt(
    p_run text, p_key text, p_attempt integer, p_status text, p_output json,
    p_error json, p_now timestamptz
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
-- once among them (the caller's promise). A step row is written as put_step writes it; the
-- attempt on it as open_attempt and close_attempt do, the attempt it held moving to
-- attempts when the next starts. On insert and in ``excluded``, the attempt columns say
-- what the op does to the attempt: attempt_status NULL nothing (put_step); else, with
-- attempt_started, start it (start_attempt: its status the op's), without, end it
-- (finish_attempt). The store's commit_first_attempts query writes a batch of first
-- attempts the same way (a test keeps them alike).
CREATE OR REPLACE FUNCTION @schema@.apply_step_ops(
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
        CASE WHEN u.kind IN ('start_attempt', 'finish_attempt') THEN u.status END,
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
        worker = CASE WHEN excluded.attempt_started IS NOT NULL THEN excluded.worker
            ELSE steps.worker END,
        attempt_status = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_status
            WHEN excluded.attempt_started IS NOT NULL THEN excluded.attempt_status
            WHEN steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_status END,
        attempt_error = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_error
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_error END,
        attempt_started = CASE WHEN excluded.attempt_started IS NOT NULL
            THEN excluded.attempt_started ELSE steps.attempt_started END,
        attempt_finished = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_finished
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_finished END;
END $$;
