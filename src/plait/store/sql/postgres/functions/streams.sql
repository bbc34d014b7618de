-- Streams a run writes (wf.stream, ctx.stream). Every writer of a run's streams holds the
-- run's row first (the order every writer of a run follows) and then the run's stream
-- lock (a transaction-scoped advisory lock): the next offset of a stream is read and
-- written under it, so offsets stay dense whichever process appends.

-- Take the stream lock of p_run, for the rest of the transaction.
CREATE OR REPLACE FUNCTION @schema@.lock_streams(p_run text)
RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended(@channel@ || ':streams:' || p_run, 0));
$$;

-- Append the entries a step attempt's body wrote (p_streams, p_values, p_steps, p_attempts
-- in order; p_values JSON text), as 'data' entries, if the run is one of p_live. An entry
-- of an attempt that no longer runs is left out: it ended (failed, cancelled, interrupted:
-- reset already, or with nothing to reset) and its body, or the process that lost it,
-- flushes late. Returns how many were written; they wake the run's watchers.
CREATE OR REPLACE FUNCTION @schema@.append_stream(
    p_run text, p_streams text[], p_values text[], p_steps text[], p_attempts integer[],
    p_live text[], p_now timestamptz
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_written integer;
BEGIN
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND status = ANY(p_live) FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM @schema@.lock_streams(p_run);
    INSERT INTO @schema@.stream_entries (run_id, stream, "offset", kind, value, step_key,
                                         attempt, at)
    SELECT p_run, u.stream,
        b.next + row_number() OVER (PARTITION BY u.stream ORDER BY u.n) - 1,
        'data', u.value::json, u.step, u.attempt, p_now
    FROM unnest(p_streams, p_values, p_steps, p_attempts) WITH ORDINALITY
        AS u(stream, value, step, attempt, n)
    CROSS JOIN LATERAL (
        SELECT coalesce(max(e."offset") + 1, 0) AS next FROM @schema@.stream_entries AS e
        WHERE e.run_id = p_run AND e.stream = u.stream
    ) AS b
    WHERE u.step IS NULL OR EXISTS (
        SELECT 1 FROM @schema@.steps AS s
        WHERE s.run_id = p_run AND s.key = u.step AND s.attempts = u.attempt
            AND s.attempt_status = 'running');
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written > 0 THEN
        PERFORM pg_notify(@channel@, 'busy:' || p_run);
    END IF;
    RETURN v_written;
END $$;

-- One entry a pass writes with its batch (wf.stream): the workflow's own, no attempt.
CREATE OR REPLACE FUNCTION @schema@.append_stream_entry(
    p_run text, p_stream text, p_value json, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_streams(p_run);
    INSERT INTO @schema@.stream_entries (run_id, stream, "offset", kind, value, step_key,
                                         attempt, at)
    SELECT p_run, p_stream, coalesce(max("offset") + 1, 0), 'data', p_value, NULL, NULL, p_now
    FROM @schema@.stream_entries WHERE run_id = p_run AND stream = p_stream;
END $$;

-- An attempt that ends failed, interrupted or cancelled resets what it wrote: readers drop
-- its entries. Whoever ends it (a pass, a step worker, a takeover, a cancel), the reset
-- follows in the same transaction (the trigger below).
CREATE OR REPLACE FUNCTION @schema@.reset_attempt_streams() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM @schema@.stream_entries
                   WHERE run_id = NEW.run_id AND step_key = NEW.key
                       AND attempt = NEW.attempts) THEN
        RETURN NULL;
    END IF;
    PERFORM @schema@.lock_streams(NEW.run_id);
    INSERT INTO @schema@.stream_entries (run_id, stream, "offset", kind, value, step_key,
                                         attempt, at)
    SELECT NEW.run_id, w.stream,
        (SELECT max(e."offset") + 1 FROM @schema@.stream_entries AS e
         WHERE e.run_id = NEW.run_id AND e.stream = w.stream),
        'reset', NULL, NEW.key, NEW.attempts, NEW.updated_at
    FROM (SELECT DISTINCT stream FROM @schema@.stream_entries
          WHERE run_id = NEW.run_id AND step_key = NEW.key AND attempt = NEW.attempts
              AND kind = 'data') AS w;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS steps_attempt_resets_streams ON @schema@.steps;
CREATE TRIGGER steps_attempt_resets_streams
AFTER UPDATE OF attempt_status ON @schema@.steps
FOR EACH ROW
WHEN (OLD.attempt_status = 'running'
      AND NEW.attempt_status IN ('failed', 'interrupted', 'cancelled'))
EXECUTE FUNCTION @schema@.reset_attempt_streams();

-- A run's end ends each of its streams, whoever ends it, in the transaction that ends it.
CREATE OR REPLACE FUNCTION @schema@.end_run_streams() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM @schema@.stream_entries WHERE run_id = NEW.id) THEN
        RETURN NULL;
    END IF;
    PERFORM @schema@.lock_streams(NEW.id);
    INSERT INTO @schema@.stream_entries (run_id, stream, "offset", kind, value, step_key,
                                         attempt, at)
    SELECT NEW.id, stream, max("offset") + 1, 'end', NULL, NULL, NULL, NEW.updated_at
    FROM @schema@.stream_entries WHERE run_id = NEW.id GROUP BY stream;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS runs_end_ends_streams ON @schema@.runs;
CREATE TRIGGER runs_end_ends_streams
AFTER UPDATE OF status ON @schema@.runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'failed', 'cancelled', 'continued')
      AND OLD.status NOT IN ('completed', 'failed', 'cancelled', 'continued'))
EXECUTE FUNCTION @schema@.end_run_streams();
