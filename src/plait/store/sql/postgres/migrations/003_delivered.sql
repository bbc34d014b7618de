-- plait schema for PostgreSQL, version 3: the order a workflow saw its step outcomes in.
-- description: steps remember when the workflow saw their outcome
--
-- Replay hands a workflow its step outcomes in the order it first saw them, so that
-- concurrent branches take the same keys and results on every pass. NULL: not seen yet
-- (or recorded before version 3; such steps are handed back in first-reach order). The
-- columns are the last of the steps row type, in StepRow's field order.

ALTER TABLE @schema@.steps ADD COLUMN delivered integer;

-- A retried run gives a failed step a fresh retry budget without forgetting its earlier
-- failures, so attempts that neither failed nor succeeded (interruptions) still count
-- right: the budget counts failures after retried_failures.
ALTER TABLE @schema@.steps ADD COLUMN retried_failures integer NOT NULL DEFAULT 0;

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
