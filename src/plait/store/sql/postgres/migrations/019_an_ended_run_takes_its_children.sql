-- plait schema for PostgreSQL, version 19: a run that ends takes its live children with it.
-- description: a run that ends cancels its live children; a cancel locks the parent first
--
-- Only a cancel ended a run's children. A run failed by one step while a child it started
-- still waited (a gather of the child and the failing step) left that child running, or
-- queued for a slot it would take for nothing. The runtime now writes cancel_children
-- (error: each child's error, parent: how the run's step for each ends) after the end of
-- a run that fails or completes with a child still live; each such child, and its own
-- live children, end cancelled as end_run cancels. apply_ops as version 8 wrote it, but
-- for that op.
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
        WHEN 'cancel_children' THEN
            FOR v_child IN SELECT id FROM @schema@.runs
                WHERE parent_run_id = p_run AND status IN ('running', 'suspended', 'queued')
                ORDER BY id
            LOOP
                PERFORM @schema@.end_run(v_child, 'cancelled', NULL, o.error, o.parent,
                                         p_now, ARRAY['running', 'suspended', 'queued']);
            END LOOP;
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

-- A cancel locks the run's parent before the run, as every other writer that ends a child
-- does (the child's own end, and now a parent's end that cancels it): a cancel of a child
-- that locked the child first, then its parent to settle its step, could deadlock with
-- that parent failing at the same moment. cancel_run as version 6 wrote it, but for that.
CREATE OR REPLACE FUNCTION @schema@.cancel_run(
    p_run text, p_error jsonb, p_parent @schema@.step_end, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
BEGIN
    SELECT parent_run_id INTO parent FROM @schema@.runs WHERE id = p_run;
    IF parent IS NOT NULL THEN
        PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE;
    END IF;
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended', 'queued']);
    RETURN @schema@.end_run(p_run, 'cancelled', NULL, p_error, p_parent, p_now,
                            ARRAY['running', 'suspended', 'queued']);
END $$;
