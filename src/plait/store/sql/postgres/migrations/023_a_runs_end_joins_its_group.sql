-- plait schema for PostgreSQL, version 23: a run's end is written with its group's steps.
-- description: a batch of step writes that ends its run is fenced and written with the group's other step writes
--
-- A pass's last batch is usually its last step's end and the run's end. With the run's
-- end among its ops it was not a batch of step writes only, so a group committed it op by
-- op (try_commit_batch, apply_ops): its own fence, a nested call and a statement for each
-- op, about a sixth of a group's time for ten-step runs. Now such a batch is fenced with
-- the group's other step-write batches, its step writes join their one statement, and its
-- run is ended after it, as apply_ops would. A run with a parent is left out of the
-- group's fence (its parent is locked before it, as try_commit_batch does); the group
-- answers its batch 'busy', and it is committed alone.
--
-- commit_group as in version 20, but for that; and a batch of a run that did not end
-- takes its ops in one loop without looking at each.
CREATE OR REPLACE FUNCTION @schema@.commit_group(
    p_runs text[], p_fences text[], p_ends integer[], p_seen bigint[], p_steps_only boolean[],
    p_ops @schema@.op[], p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(array_length(p_runs, 1), 0);
    outcome text[] := array_fill(NULL::text, ARRAY[n]);
    take boolean[] := array_fill(false, ARRAY[coalesce(array_length(p_ops, 1), 0)]);
    taken boolean := false;
    -- per batch: it has ops, and its last ends its run
    ending boolean[] := ARRAY(
        SELECT coalesce(e > lag(e, 1, 0) OVER (ORDER BY i) AND (p_ops[e]).kind = 'end_run',
            false)
        FROM unnest(p_ends) WITH ORDINALITY AS x(e, i) ORDER BY i
    );
    held text[];
    holders text[];
    ended boolean[];
    at integer;
    first integer;
    last integer;
    o @schema@.op;
BEGIN
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.lease_owner), '{}'),
        coalesce(array_agg(l.status IN ('completed', 'failed', 'cancelled')), '{}')
    INTO held, holders, ended
    FROM (
        SELECT r.id, r.lease_owner, r.status FROM @schema@.runs AS r
        WHERE r.id = ANY (
            SELECT b.run FROM unnest(p_runs, p_steps_only, ending) AS b(run, steps_only, ending)
            WHERE b.steps_only AND NOT b.ending
        ) OR (r.parent_run_id IS NULL AND r.id = ANY (
            SELECT b.run FROM unnest(p_runs, p_steps_only, ending) AS b(run, steps_only, ending)
            WHERE b.steps_only AND b.ending
        ))
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
            last := CASE WHEN ending[i] THEN p_ends[i] - 1 ELSE p_ends[i] END;
            IF NOT ended[at] THEN
                FOR k IN first .. last LOOP
                    take[k] := true;
                END LOOP;
                taken := taken OR last >= first;
            ELSE
                FOR k IN first .. last LOOP
                    IF (p_ops[k]).kind = 'start_attempt' THEN
                        outcome[i] := 'ended';
                    ELSIF NOT ((p_ops[k]).kind = 'finish_attempt'
                            AND (p_ops[k]).status = 'interrupted') THEN
                        take[k] := true;
                        taken := true;
                    END IF;
                END LOOP;
            END IF;
        END IF;
    END LOOP;
    IF taken THEN
        PERFORM @schema@.apply_step_ops(p_ops, take, p_now);
    END IF;
    FOR i IN 1 .. n LOOP
        first := CASE WHEN i = 1 THEN 1 ELSE p_ends[i - 1] + 1 END;
        IF NOT p_steps_only[i] THEN
            outcome[i] := @schema@.try_commit_batch(
                p_runs[i], p_fences[i], coalesce(p_ops[first:p_ends[i]], '{}'), p_now, false
            );
        ELSIF ending[i] AND outcome[i] IN ('done', 'ended') THEN
            -- only from running: a run that ended under its pass stays as it ended
            o := p_ops[p_ends[i]];
            PERFORM @schema@.end_run(p_runs[i], o.status, o.output, o.error, o.parent, p_now,
                                     ARRAY['running']);
        END IF;
        IF outcome[i] IN ('done', 'ended') AND p_seen[i] IS NOT NULL THEN
            outcome[i] := CASE
                WHEN @schema@.release_after_batch(p_runs[i], p_fences[i], p_now, p_seen[i])
                THEN 'due' ELSE 'done' END;
        END IF;
    END LOOP;
    RETURN outcome;
END $$;
