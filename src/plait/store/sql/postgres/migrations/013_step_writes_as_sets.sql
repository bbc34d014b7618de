-- plait schema for PostgreSQL, version 13: the step writes of a batch, or of a whole group,
-- as three statements.
-- description: step rows and attempt rows are written set-based, one statement each for a whole group
--
-- Most batches hold only step writes (the end of one attempt and the start of the next).
-- Written op by op, each costs a nested function call and a statement of its own, all on
-- the one backend that commits a process's groups. Written as sets, a group of a hundred
-- such batches costs one statement to lock and fence their runs, and three to write their
-- steps and attempts. Batches with any other op are written op by op, as before.

-- The step writes (put_step, start_attempt, finish_attempt) among p_ops for which
-- p_take[k] is true (every one when p_take is NULL), as three statements. A step written
-- twice keeps its last write, as in order; an attempt's start is written before any end.
-- A step row is written as put_step (version 3) writes it: the same columns on update.
CREATE FUNCTION @schema@.apply_step_ops(
    p_ops @schema@.op[], p_take boolean[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO @schema@.steps
    SELECT (last.step).* FROM (
        SELECT DISTINCT ON ((u.step).run_id, (u.step).key) u.step
        FROM unnest(p_ops) WITH ORDINALITY AS u
        WHERE p_take IS NULL OR p_take[u.ordinality]
        ORDER BY (u.step).run_id, (u.step).key, u.ordinality DESC
    ) AS last
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at, delivered = excluded.delivered,
        retried_failures = excluded.retried_failures;
    INSERT INTO @schema@.attempts (run_id, key, attempt, status, worker, started_at)
    SELECT (u.step).run_id, (u.step).key, u.attempt, 'running', u.worker, p_now
    FROM unnest(p_ops) WITH ORDINALITY AS u
    WHERE u.kind = 'start_attempt' AND (p_take IS NULL OR p_take[u.ordinality])
    ON CONFLICT (run_id, key, attempt) DO UPDATE SET
        status = 'running', worker = excluded.worker, started_at = excluded.started_at,
        finished_at = NULL, output = NULL, error = NULL;
    UPDATE @schema@.attempts AS a SET status = u.status, output = u.output, error = u.error,
        finished_at = p_now
    FROM unnest(p_ops) WITH ORDINALITY AS u
    WHERE u.kind = 'finish_attempt' AND (p_take IS NULL OR p_take[u.ordinality])
        AND a.run_id = (u.step).run_id AND a.key = (u.step).key AND a.attempt = u.attempt;
END $$;

-- try_commit_batch as in version 5, with a batch of step writes only written as sets.
CREATE OR REPLACE FUNCTION @schema@.try_commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz, p_wait boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    parent text;
    holder text;
    v_status text;
    steps_only boolean := true;
BEGIN
    FOREACH o IN ARRAY p_ops LOOP
        IF o.kind NOT IN ('put_step', 'start_attempt', 'finish_attempt') THEN
            steps_only := false;
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
-- only (the caller's promise, and each run in the group at most once): those batches are
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
