-- plait schema for PostgreSQL, version 8: approvals, forks, published values, retention.
-- description: approval decisions, forked runs, published values, indexes for pruning
--
-- A decision on an approval gate is a message to its run, kept in events beside the
-- events (name '__approval:<gate>'), with who sent it and what became of it: held (the
-- gate is not reached yet), accepted or refused (reason: a JSON record). Ordinary events
-- leave these columns empty.

ALTER TABLE @schema@.events ADD COLUMN decided_by text, ADD COLUMN outcome text,
    ADD COLUMN reason jsonb, ADD COLUMN judged_at timestamptz;
-- a run's decisions are read, and a pruned run's events deleted, by run
CREATE INDEX events_run ON @schema@.events (run_id);

-- open and closed approval gates across runs (list_approvals), without a scan of steps
CREATE INDEX steps_gates ON @schema@.steps (status, created_at) WHERE kind = 'approval';

-- the run a fork was made from
ALTER TABLE @schema@.runs ADD COLUMN forked_from text;

-- values a workflow publishes (wf.set_value): the last write of each key wins
CREATE TABLE @schema@.run_values (
    run_id     text NOT NULL,
    key        text NOT NULL,
    value      jsonb,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- ended top-level runs oldest first: what a prune walks through, batch by batch
CREATE INDEX runs_ended ON @schema@.runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled') AND parent_run_id IS NULL;

-- Three new ops (plait.store.base): set_value (name, output), guard_step (key, status:
-- the batch is refused with SQLSTATE PLT05 unless the step still has that status),
-- take_decision (event_id, key, status: the outcome, error: the reason; purpose 'take'
-- claims a held decision, SQLSTATE PLT05 if another pass took it first; purpose
-- 'refuse' turns the accepted decision of gate key into a refused one).
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
        WHEN 'set_value' THEN
            INSERT INTO @schema@.run_values (run_id, key, value, updated_at)
            VALUES (p_run, o.name, o.output, p_now)
            ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value,
                updated_at = excluded.updated_at;
            PERFORM pg_notify(@channel@, 'run:' || p_run);
        WHEN 'guard_step' THEN
            PERFORM 1 FROM @schema@.steps
            WHERE run_id = p_run AND key = o.key AND status = o.status;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'step % of run % changed under the pass', o.key, p_run
                    USING ERRCODE = 'PLT05';
            END IF;
        WHEN 'take_decision' THEN
            IF o.purpose = 'take' THEN
                UPDATE @schema@.events SET consumed_by = o.key, outcome = o.status,
                    reason = o.error, judged_at = p_now
                WHERE id = o.event_id AND consumed_by IS NULL;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'decision % was taken by another pass', o.event_id
                        USING ERRCODE = 'PLT05';
                END IF;
            ELSE
                UPDATE @schema@.events SET outcome = o.status, reason = o.error,
                    judged_at = p_now
                WHERE run_id = p_run AND consumed_by = o.key AND outcome = 'accepted';
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown store operation %', o.kind;
        END CASE;
    END LOOP;
END $$;

-- A decision on an approval gate, from outside a pass, in one transaction. p_key names the
-- open gate it decides (NULL: none is open; the decision is held for the gate, or refused
-- as p_outcome says). An accepted decision is written (with p_ops: how the gate closes)
-- only while the gate is still open and p_now is before its deadline; otherwise it is
-- stored refused with p_if_closed / p_if_expired. Returns 'accepted', 'held', 'refused',
-- 'closed' or 'expired'. SQLSTATE PLT02 / PLT03 as for the other actions (a held decision
-- needs a running or suspended run).
CREATE FUNCTION @schema@.submit_decision(
    p_run text, p_name text, p_payload jsonb, p_by text, p_outcome text, p_reason jsonb,
    p_key text, p_ops @schema@.op[], p_if_closed jsonb, p_if_expired jsonb,
    p_now timestamptz
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_deadline timestamptz;
    v_result text := p_outcome;
    v_reason jsonb := p_reason;
    v_consumed text := p_key;
BEGIN
    IF p_outcome = 'held' THEN
        PERFORM @schema@.lock_for_action(p_run, ARRAY['queued', 'running', 'suspended']);
        v_consumed := NULL;
    ELSE
        PERFORM @schema@.lock_for_action(p_run,
            ARRAY['queued', 'running', 'suspended', 'completed', 'failed', 'cancelled']);
    END IF;
    IF p_outcome = 'accepted' THEN
        SELECT status, wake_at INTO v_status, v_deadline FROM @schema@.steps
        WHERE run_id = p_run AND key = p_key;
        IF v_status IS DISTINCT FROM 'pending' THEN
            v_result := 'closed';
            v_reason := p_if_closed;
        ELSIF v_deadline IS NOT NULL AND p_now >= v_deadline THEN
            v_result := 'expired';
            v_reason := p_if_expired;
        ELSE
            PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
        END IF;
    END IF;
    INSERT INTO @schema@.events (run_id, name, payload, created_at, consumed_by, decided_by,
                                 outcome, reason, judged_at)
    VALUES (p_run, '__approval:' || p_name, p_payload, p_now, coalesce(v_consumed, CASE
                WHEN v_result = 'held' THEN NULL ELSE '' END),
            p_by, CASE WHEN v_result IN ('closed', 'expired') THEN 'refused' ELSE v_result END,
            v_reason, CASE WHEN v_result = 'held' THEN NULL ELSE p_now END);
    IF v_result IN ('accepted', 'held') THEN
        PERFORM @schema@.wake_run(p_run, p_now, p_now);
    END IF;
    RETURN v_result;
END $$;

-- A fork: the new run (p_new) with the steps it keeps (p_ops), and where it came from.
CREATE FUNCTION @schema@.fork_run(
    p_new @schema@.new_run, p_from text, p_ops @schema@.op[], p_now timestamptz
) RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
BEGIN
    IF NOT @schema@.insert_run(p_new, p_now) THEN
        RAISE EXCEPTION 'run % exists', p_new.id USING ERRCODE = 'PLT06';
    END IF;
    UPDATE @schema@.runs SET forked_from = p_from WHERE id = p_new.id;
    PERFORM @schema@.apply_ops(p_new.id, p_ops, p_now);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_new.id;
END $$;

-- One batch of a prune: up to p_limit ended top-level runs last updated before p_cutoff,
-- after the cursor (p_after_at, p_after_id), whose whole tree of child runs has ended
-- too, are deleted with everything of theirs. Returns how many runs (children included)
-- went, and the cursor of the last root looked at (NULL: nothing left to look at).
CREATE FUNCTION @schema@.prune_runs(
    p_statuses text[], p_cutoff timestamptz, p_after_at timestamptz, p_after_id text,
    p_limit integer, OUT deleted integer, OUT last_at timestamptz, OUT last_id text
) LANGUAGE plpgsql AS $$
DECLARE
    roots text[];
    doomed text[];
BEGIN
    SELECT array_agg(id ORDER BY updated_at, id) INTO roots
    FROM (
        SELECT id, updated_at FROM @schema@.runs
        WHERE status IN ('completed', 'failed', 'cancelled') AND parent_run_id IS NULL
            AND status = ANY (p_statuses) AND updated_at < p_cutoff
            AND (p_after_at IS NULL OR (updated_at, id) > (p_after_at, p_after_id))
        ORDER BY updated_at, id LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) picked;
    deleted := 0;
    IF roots IS NULL THEN
        last_at := NULL;
        last_id := NULL;
        RETURN;
    END IF;
    last_id := roots[array_length(roots, 1)];
    SELECT updated_at INTO last_at FROM @schema@.runs WHERE id = last_id;
    WITH RECURSIVE tree(root, id, status) AS (
        SELECT r.id, r.id, r.status FROM @schema@.runs r WHERE r.id = ANY (roots)
        UNION ALL
        SELECT t.root, c.id, c.status FROM @schema@.runs c JOIN tree t ON c.parent_run_id = t.id
    ), whole AS (
        SELECT root FROM tree GROUP BY root
        HAVING bool_and(status IN ('completed', 'failed', 'cancelled'))
    )
    SELECT array_agg(t.id) INTO doomed FROM tree t JOIN whole w ON w.root = t.root;
    IF doomed IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM @schema@.attempts WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.steps WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.events WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.timers WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.jobs WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.state WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.run_values WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.runs WHERE id = ANY (doomed);
    deleted := array_length(doomed, 1);
END $$;
