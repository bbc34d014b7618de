-- plait schema for PostgreSQL, version 20: a pass whose run ended under it starts no attempt.
-- description: a batch committed after its run ended starts no attempt, and says so
--
-- A pass still holds its lease when another process cancels the run. Version 4 kept its
-- batches' step records and dropped the child runs, timers and jobs they would start. But
-- the pass went on to its next step, committed that step's start and ran its body: a side
-- effect in a run that had already ended, and a step left running in it. Now an attempt's
-- start is dropped too, and a commit that dropped one answers 'ended', so the pass stops
-- before the body. A batch that also releases the run (a pass's last) answers as before:
-- its pass runs nothing after it. An attempt's interruption (a stop's: the step is to run
-- again elsewhere, which an ended run never does) is dropped as well, so it cannot undo
-- how the cancel ended the step (version 21).

-- try_commit_batch as in version 13, but an ended run also drops start_attempt and
-- interruptions, and the answer is 'ended' when it dropped a start.
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
    kept integer;
    answer text := 'done';
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
            kept := cardinality(p_ops) - (
                SELECT count(*) FROM unnest(p_ops) AS x WHERE x.kind = 'start_attempt'
            );
            IF kept < cardinality(p_ops) THEN
                answer := 'ended';
            END IF;
            p_ops := ARRAY(
                SELECT x FROM unnest(p_ops) AS x
                WHERE x.kind NOT IN ('create_child_run', 'set_timer', 'enqueue_job',
                    'start_attempt')
                    AND NOT (x.kind = 'finish_attempt' AND x.status = 'interrupted')
            );
        END IF;
    END IF;
    IF cardinality(p_ops) = 0 THEN
        RETURN answer;
    ELSIF steps_only THEN
        PERFORM @schema@.apply_step_ops(p_ops, NULL, p_now);
    ELSE
        PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    END IF;
    RETURN answer;
END $$;

-- commit_batch answers 'done' or 'ended' (see try_commit_batch) instead of nothing; a lost
-- lease still raises PLT01.
DROP FUNCTION @schema@.commit_batch(text, text, @schema@.op[], timestamptz);
CREATE FUNCTION @schema@.commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    answer text := @schema@.try_commit_batch(p_run, p_fence, p_ops, p_now, true);
BEGIN
    IF answer = 'lost' THEN
        RAISE EXCEPTION 'lost the lease on run %', p_run USING ERRCODE = 'PLT01';
    END IF;
    RETURN answer;
END $$;

-- commit_steps (version 14) answers 'lost', 'done' or 'ended' instead of a boolean, and an
-- ended run's batch starts no attempt and interrupts none.
DROP FUNCTION @schema@.commit_steps(text, text, @schema@.op[], timestamptz);
CREATE FUNCTION @schema@.commit_steps(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    answer text := 'done';
BEGIN
    SELECT status INTO v_status FROM @schema@.runs
    WHERE id = p_run AND lease_owner = p_fence FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'lost';
    END IF;
    IF v_status IN ('completed', 'failed', 'cancelled') THEN
        IF EXISTS (SELECT FROM unnest(p_ops) AS x WHERE x.kind = 'start_attempt') THEN
            answer := 'ended';
        END IF;
        p_ops := ARRAY(
            SELECT x FROM unnest(p_ops) AS x
            WHERE x.kind <> 'start_attempt'
                AND NOT (x.kind = 'finish_attempt' AND x.status = 'interrupted')
        );
    END IF;
    PERFORM @schema@.apply_step_ops(p_ops, NULL, p_now);
    RETURN answer;
END $$;

-- commit_group as in version 13, but a batch of step writes whose run ended writes no
-- attempt start and no interruption, and is answered 'ended' when it had a start. A batch
-- that also releases its run is released as before, whether or not its run ended.
CREATE OR REPLACE FUNCTION @schema@.commit_group(
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
    ended boolean[];
    at integer;
    first integer;
BEGIN
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.lease_owner), '{}'),
        coalesce(array_agg(l.status IN ('completed', 'failed', 'cancelled')), '{}')
    INTO held, holders, ended
    FROM (
        SELECT r.id, r.lease_owner, r.status FROM @schema@.runs AS r
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
                IF ended[at] AND (p_ops[k]).kind = 'start_attempt' THEN
                    outcome[i] := 'ended';
                ELSIF ended[at] AND (p_ops[k]).kind = 'finish_attempt'
                        AND (p_ops[k]).status = 'interrupted' THEN
                    CONTINUE;
                ELSE
                    take[k] := true;
                    taken := true;
                END IF;
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
        IF outcome[i] IN ('done', 'ended') AND p_seen[i] IS NOT NULL THEN
            outcome[i] := CASE
                WHEN @schema@.release_after_batch(p_runs[i], p_fences[i], p_now, p_seen[i])
                THEN 'due' ELSE 'done' END;
        END IF;
    END LOOP;
    RETURN outcome;
END $$;
