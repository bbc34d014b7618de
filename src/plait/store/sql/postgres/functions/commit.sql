-- The batches of a pass. Every batch is fenced by its run's lease: the run row is locked
-- and must still be leased to the pass. A process running many passes at once sends their
-- batches together (commit_group): one statement, one transaction, one WAL flush for all
-- of them; a batch whose pass lost its lease, or whose run row another transaction holds,
-- is left out and reported without failing the others.

-- Apply the writes of a pass in order (plait.store.ops). SQLSTATE PLT01: an event
-- was consumed by another pass (the whole statement rolls back, like a lost lease); PLT05:
-- a guard_step's step no longer has the status it names, another pass took the decision
-- a take_decision claims, or the request a take_request claims was withdrawn. take_decision with purpose 'refuse' turns the accepted decision
-- of gate key into a refused one. cancel_children ends the run's live children, and
-- theirs, as end_run cancels (status and error: each child's, parent: how the run's step
-- for each ends, cut: how each child's steps in flight end; key: only the child of that
-- step). An end_run with a run (a new run) continues as new: the run that continues it
-- starts if the end moved the run.
-- send_event stores an event for another run (or this one) through store_event; PLT07: that
-- run has ended (or is gone) since the pass read it, and the whole statement rolls back.
-- cancel_job (step, cut) ends a job step the workflow cancelled (plait.store.ops.CancelJob).
-- append_stream (name, output) appends the workflow's own entry to stream name.
CREATE OR REPLACE FUNCTION @schema@.apply_ops(
    p_run text, p_ops @schema@.op[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    v_child text;
BEGIN
    FOREACH o IN ARRAY p_ops LOOP
        CASE o.kind
        WHEN 'put_step' THEN
            PERFORM @schema@.put_step(o.step);
        WHEN 'start_attempt' THEN
            PERFORM @schema@.put_step(o.step);
            PERFORM @schema@.open_attempt((o.step).run_id, (o.step).key, o.attempt, o.status,
                                          o.worker, p_now);
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
            PERFORM pg_notify(@channel@, 'job');
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
            IF cardinality(@schema@.end_run(p_run, o.status, o.output, o.error, o.parent,
                                            o.cut, p_now, ARRAY['running'])) > 0
                    AND (o.run).id IS NOT NULL THEN
                PERFORM @schema@.start_successor(p_run, o.run, p_now);
            END IF;
        WHEN 'cancel_children' THEN
            -- key: only the child run of that step (its workflow cancelled the step)
            FOR v_child IN SELECT id FROM @schema@.runs
                WHERE parent_run_id = p_run AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention')
                    AND (o.key IS NULL OR parent_step_key = o.key)
                ORDER BY id
            LOOP
                PERFORM @schema@.end_run(v_child, o.status, NULL, o.error, o.parent, o.cut,
                                         p_now, ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
            END LOOP;
        WHEN 'set_value' THEN
            INSERT INTO @schema@.run_values (run_id, key, value, updated_at)
            VALUES (p_run, o.name, o.output, p_now)
            ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value,
                updated_at = excluded.updated_at;
            PERFORM pg_notify(@channel@, 'run:' || p_run);
        WHEN 'set_tags' THEN
            PERFORM @schema@.put_tags(p_run, o.output);
        WHEN 'append_stream' THEN
            -- name: the stream, output: the value (wf.stream)
            PERFORM @schema@.append_stream_entry(p_run, o.name, o.output, p_now);
        WHEN 'record_version' THEN
            UPDATE @schema@.runs SET version = o.name WHERE id = p_run AND version IS NULL;
        WHEN 'send_event' THEN
            -- key: the run it goes to, output: the payload, purpose: its dedup key; stored
            -- neither now nor before (a batch applied twice), the run has ended
            IF NOT @schema@.store_event(o.key, o.name, o.output, o.purpose, p_now)
                    AND NOT EXISTS (SELECT 1 FROM @schema@.events
                                    WHERE run_id = o.key AND dedup = o.purpose) THEN
                RAISE EXCEPTION 'run % ended before event % was stored', o.key, o.name
                    USING ERRCODE = 'PLT07';
            END IF;
        WHEN 'guard_step' THEN
            PERFORM 1 FROM @schema@.steps
            WHERE run_id = p_run AND key = o.key AND status = o.status;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'step % of run % changed under the pass', o.key, p_run
                    USING ERRCODE = 'PLT05';
            END IF;
        WHEN 'cancel_job' THEN
            -- the workflow cancelled a job step: its job goes; the step ends as the cut
            -- says while it is still in flight (a step worker's end committed first
            -- stays); the workflow reached it here either way
            DELETE FROM @schema@.jobs WHERE run_id = p_run AND step_key = (o.step).key;
            UPDATE @schema@.steps SET delivered = (o.step).delivered
            WHERE run_id = p_run AND key = (o.step).key;
            UPDATE @schema@.steps SET status = (o.cut).step, error = (o.step).error,
                wake_at = NULL, updated_at = p_now,
                attempt_status = CASE WHEN attempt_status = (o.cut).open_attempt
                    THEN (o.cut).attempt ELSE attempt_status END,
                attempt_error = CASE WHEN attempt_status = (o.cut).open_attempt
                    THEN (o.step).error ELSE attempt_error END,
                attempt_finished = CASE WHEN attempt_status = (o.cut).open_attempt
                    THEN p_now ELSE attempt_finished END
            WHERE run_id = p_run AND key = (o.step).key
                AND status IN ('pending', 'scheduled', 'running');
        WHEN 'take_decision' THEN
            IF o.purpose = 'take' THEN
                -- a refused decision keeps who sent it, when and why, never its data
                UPDATE @schema@.events SET consumed_by = o.key, outcome = o.status,
                    reason = o.error, judged_at = p_now,
                    payload = CASE WHEN o.status = 'refused' THEN NULL ELSE payload END
                WHERE id = o.event_id AND consumed_by IS NULL;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'decision % was taken by another pass', o.event_id
                        USING ERRCODE = 'PLT05';
                END IF;
            ELSE
                UPDATE @schema@.events SET outcome = o.status, reason = o.error,
                    judged_at = p_now,
                    payload = CASE WHEN o.status = 'refused' THEN NULL ELSE payload END
                WHERE run_id = p_run AND consumed_by = o.key AND outcome = 'accepted';
            END IF;
        WHEN 'take_request' THEN
            -- one conditional write decides between this take and the sender's withdrawal
            UPDATE @schema@.requests SET status = o.status, taken_by = o.key
            WHERE id = o.event_id AND run_id = p_run AND status = o.purpose;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'request % was withdrawn before the pass took it', o.event_id
                    USING ERRCODE = 'PLT05';
            END IF;
        WHEN 'answer_request' THEN
            UPDATE @schema@.requests SET status = o.status, reply = o.output,
                refusal = o.error, answered_at = p_now
            WHERE id = o.event_id AND run_id = p_run AND status = o.purpose;
            -- its sender waits on the run: an answer settles nothing
            PERFORM pg_notify(@channel@, 'busy:' || p_run);
        ELSE
            RAISE EXCEPTION 'unknown store operation %', o.kind;
        END CASE;
    END LOOP;
END $$;

-- A batch with the lease check answered instead of raised: 'lost' when p_fence no longer
-- holds the run, 'done' once written. With p_wait false the rows it must lock are taken
-- only if free: 'busy' when one is not (nothing is written then), so a group never waits
-- on a lock, and a group that never waits can be in no deadlock nor hold its locks for
-- long. A batch that ends a child run locks the parent row first, the same order as the
-- cancel cascade. A batch of step writes only (each of its own step of this run) is
-- written by apply_step_ops, any other op by op. A pass still holds its lease when another
-- process ends its run (a cancel): its batch keeps how its steps ended but starts nothing,
-- no child run, timer, job nor attempt, and interrupts no attempt (an interruption sends
-- the step to run again elsewhere, which an ended run never does, and would undo how the
-- cancel ended it). The answer is 'ended' when a start was dropped, so the pass stops
-- before the step's body. A batch that sends events locks the rows of the runs it sends to
-- and its own in the order of their ids (two runs sending to each other lock alike), or,
-- not waiting, answers 'busy' when one of them is locked elsewhere.
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
    targets text[] := ARRAY(
        SELECT DISTINCT x.key FROM unnest(p_ops) AS x WHERE x.kind = 'send_event'
    );
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
    IF cardinality(targets) > 0 THEN
        targets := array_append(targets, p_run);
        IF p_wait THEN
            PERFORM 1 FROM @schema@.runs WHERE id = ANY (targets) ORDER BY id FOR UPDATE;
        ELSIF (SELECT count(*) FROM (
                SELECT 1 FROM @schema@.runs WHERE id = ANY (targets) FOR UPDATE SKIP LOCKED
            ) AS l) < (SELECT count(*) FROM @schema@.runs WHERE id = ANY (targets)) THEN
            RETURN 'busy';
        END IF;
    END IF;
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
        IF v_status IN ('completed', 'failed', 'cancelled', 'continued') THEN
            kept := cardinality(p_ops) - (
                SELECT count(*) FROM unnest(p_ops) AS x WHERE x.kind = 'start_attempt'
            );
            IF kept < cardinality(p_ops) THEN
                answer := 'ended';
            END IF;
            p_ops := ARRAY(
                SELECT x FROM unnest(p_ops) AS x
                WHERE x.kind NOT IN ('create_child_run', 'set_timer', 'enqueue_job',
                    'start_attempt', 'append_stream')
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

-- One batch in its own transaction, waiting for its locks: 'done' or 'ended' (see
-- try_commit_batch); a lost lease raises SQLSTATE PLT01.
CREATE OR REPLACE FUNCTION @schema@.commit_batch(
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

-- A lone batch of step writes (a run with one step going at a time commits one per step:
-- the end of one attempt and the start of the next). The store decided it holds step
-- writes only, so this takes the run's lock under the lease and writes the steps with
-- apply_step_ops, with no loop over the ops. 'lost', with nothing written, when p_fence no
-- longer holds the lease; else 'done', or 'ended' as try_commit_batch answers it (an ended
-- run's batch starts no attempt and interrupts none).
CREATE OR REPLACE FUNCTION @schema@.commit_steps(
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
    IF v_status IN ('completed', 'failed', 'cancelled', 'continued') THEN
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

-- Give the run back after a pass's last batch: due again at once if someone woke it
-- during the pass (its wake-up count moved from p_seen), else at its earliest timer.
CREATE OR REPLACE FUNCTION @schema@.release_after_batch(
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

-- The last writes of a pass and the release of its lease in one transaction: one commit
-- instead of two. Returns whether the run is due again at once.
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
-- another transaction: it is to be committed alone), 'ended' (see try_commit_batch), 'due'
-- (committed and released, due again at once) or 'done'. Nothing of a lost or busy batch
-- is written. p_steps_only[i] is true when batch i holds step writes only, each of its own
-- step of its run, but for a last op that may end the run (the caller's promise, and each
-- run in the group at most once): those batches are fenced with one statement that locks
-- every one of their runs not locked elsewhere, their step writes are written together by
-- apply_step_ops, and a run's end after them, as apply_ops would. A run with a parent
-- whose batch ends it is left out of that fence (its parent is locked before it, as
-- try_commit_batch does): its batch is answered 'busy'. The other batches are committed
-- one by one by try_commit_batch.
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
        coalesce(array_agg(l.status IN ('completed', 'failed', 'cancelled', 'continued')), '{}')
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
            PERFORM @schema@.end_run(p_runs[i], o.status, o.output, o.error, o.parent, o.cut,
                                     p_now, ARRAY['running']);
        END IF;
        IF outcome[i] IN ('done', 'ended') AND p_seen[i] IS NOT NULL THEN
            outcome[i] := CASE
                WHEN @schema@.release_after_batch(p_runs[i], p_fences[i], p_now, p_seen[i])
                THEN 'due' ELSE 'done' END;
        END IF;
    END LOOP;
    RETURN outcome;
END $$;
