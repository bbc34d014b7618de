-- plait schema for PostgreSQL, version 5: the batches of many passes in one transaction.
-- description: batches of concurrent passes share one commit
--
-- A process running many passes at once sends their batches together: one statement, one
-- transaction, one WAL flush for all of them. A batch whose pass lost its lease, or whose
-- run row another transaction holds, is left out (nothing of it is written) and reported
-- without failing the others; any other error rolls the whole group back and the store
-- commits its batches one by one.

-- A batch, fenced by the run lease, with the lease check answered instead of raised:
-- 'lost' when p_fence no longer holds the run, 'done' once written. With p_wait false the
-- rows it must lock are taken only if free: 'busy' when one is not (nothing is written
-- then), so a group never waits on a lock, and a group that never waits can be in no
-- deadlock nor hold its locks for long.
CREATE FUNCTION @schema@.try_commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz, p_wait boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    parent text;
    holder text;
    v_status text;
BEGIN
    IF p_fence IS NOT NULL THEN
        FOREACH o IN ARRAY p_ops LOOP
            IF o.kind = 'end_run' THEN
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
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    RETURN 'done';
END $$;

CREATE OR REPLACE FUNCTION @schema@.commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF @schema@.try_commit_batch(p_run, p_fence, p_ops, p_now, true) = 'lost' THEN
        RAISE EXCEPTION 'lost the lease on run %', p_run USING ERRCODE = 'PLT01';
    END IF;
END $$;

-- Give the run back after a pass's last batch: due again at once if someone woke it
-- during the pass (its wake-up count moved from p_seen), else at its earliest timer.
CREATE FUNCTION @schema@.release_after_batch(
    p_run text, p_fence text, p_now timestamptz, p_seen bigint
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    due timestamptz;
BEGIN
    UPDATE @schema@.runs SET lease_owner = NULL, lease_until = NULL, wake_at = CASE
        WHEN status <> 'running' THEN NULL
        WHEN wakeups <> p_seen THEN p_now
        ELSE (SELECT min(t.wake_at) FROM @schema@.timers t WHERE t.run_id = runs.id) END
    WHERE id = p_run AND lease_owner = p_fence
    RETURNING wake_at INTO due;
    RETURN due IS NOT NULL AND due <= p_now;
END $$;

CREATE OR REPLACE FUNCTION @schema@.commit_and_release(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz, p_seen bigint
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.commit_batch(p_run, p_fence, p_ops, p_now);
    RETURN @schema@.release_after_batch(p_run, p_fence, p_now, p_seen);
END $$;

-- Batch i is p_runs[i], fenced by p_fences[i] (never NULL here), with the ops
-- p_ops[p_ends[i-1]+1 : p_ends[i]], released after its writes when p_seen[i] is not NULL.
-- Returns per batch: 'lost' (its lease is gone), 'busy' (a row it must lock is locked by
-- another transaction: it is to be committed alone), 'due' (committed and released, due
-- again at once) or 'done'. Nothing of a lost or busy batch is written.
CREATE FUNCTION @schema@.commit_group(
    p_runs text[], p_fences text[], p_ends integer[], p_seen bigint[],
    p_ops @schema@.op[], p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    outcome text[] := '{}';
    result text;
    first integer := 1;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_runs, 1), 0) LOOP
        result := @schema@.try_commit_batch(
            p_runs[i], p_fences[i], coalesce(p_ops[first:p_ends[i]], '{}'), p_now, false
        );
        IF result = 'done' AND p_seen[i] IS NOT NULL
            AND @schema@.release_after_batch(p_runs[i], p_fences[i], p_now, p_seen[i]) THEN
            result := 'due';
        END IF;
        outcome := outcome || result;
        first := p_ends[i] + 1;
    END LOOP;
    RETURN outcome;
END $$;
