-- Events, approval decisions and requests sent to a run from outside its passes.

-- Store an event for a run that has not ended and wake it, unless the run took an event of
-- de-duplication key p_dedup already (the unique index's conflict; NULL: no key). False
-- when nothing was stored. A pass's send_event op writes through it too: a run that ended
-- (or was pruned) since the pass read it takes nothing.
CREATE OR REPLACE FUNCTION @schema@.store_event(
    p_run text, p_name text, p_payload json, p_dedup text, p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO @schema@.events (run_id, name, payload, created_at, dedup)
    SELECT p_run, p_name, p_payload, p_now, p_dedup
    WHERE EXISTS (SELECT 1 FROM @schema@.runs
                  WHERE id = p_run AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention'))
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
    RETURN true;
END $$;

-- An event for a run, which wakes it (a queued run keeps it for its wait). SQLSTATE PLT02
-- / PLT03 as lock_for_action raises them. With p_dedup, a key the run took already (held
-- or consumed) changes nothing, whatever became of the run since: false. False too when
-- nothing was stored; true once the event is stored.
CREATE OR REPLACE FUNCTION @schema@.send_event(
    p_run text, p_name text, p_payload json, p_dedup text, p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF p_dedup IS NOT NULL THEN
        PERFORM 1 FROM @schema@.runs WHERE id = p_run FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'PLT02';
        END IF;
        IF EXISTS (SELECT 1 FROM @schema@.events WHERE run_id = p_run AND dedup = p_dedup) THEN
            RETURN false;
        END IF;
    END IF;
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
    RETURN @schema@.store_event(p_run, p_name, p_payload, p_dedup, p_now);
END $$;

-- A decision on an approval gate, from outside a pass, in one transaction. p_key names the
-- open gate it decides (NULL: none is open; the decision is held for the gate, or refused
-- as p_outcome says). An accepted decision is written (with p_ops: how the gate closes)
-- only while the gate is still open and p_now is before its deadline; otherwise it is
-- stored refused with p_if_closed / p_if_expired. A refused decision is stored without its
-- payload (who, when and why stay), and not at all once its gate (p_key, '' for none)
-- holds p_refused_cap refused ones (NULL: no cap). Returns 'accepted', 'held', 'refused',
-- 'closed' or 'expired'. SQLSTATE PLT02 / PLT03 as for the other actions (a held decision
-- needs a running or suspended run).
CREATE OR REPLACE FUNCTION @schema@.submit_decision(
    p_run text, p_name text, p_payload json, p_by text, p_outcome text, p_reason json,
    p_key text, p_ops @schema@.op[], p_if_closed json, p_if_expired json,
    p_now timestamptz, p_refused_cap integer
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_deadline timestamptz;
    v_result text := p_outcome;
    v_reason json := p_reason;
    v_consumed text := p_key;
    v_refused boolean;
BEGIN
    IF p_outcome = 'held' THEN
        PERFORM @schema@.lock_for_action(p_run, ARRAY['queued', 'running', 'suspended', 'paused', 'needs_attention']);
        v_consumed := NULL;
    ELSE
        PERFORM @schema@.lock_for_action(p_run,
            ARRAY['queued', 'running', 'suspended', 'paused', 'needs_attention', 'completed', 'failed', 'cancelled',
                  'continued']);
        v_consumed := coalesce(p_key, '');
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
    v_refused := v_result IN ('refused', 'closed', 'expired');
    -- the run's row lock (lock_for_action) serializes the decisions of a run, so this
    -- count and the insert below see every refusal committed before them
    IF v_refused AND p_refused_cap IS NOT NULL AND (
        SELECT count(*) FROM @schema@.events
        WHERE run_id = p_run AND consumed_by = v_consumed AND outcome = 'refused'
    ) >= p_refused_cap THEN
        RETURN v_result;
    END IF;
    -- a refused decision keeps who sent it, when and why, never its data
    INSERT INTO @schema@.events (run_id, name, payload, created_at, consumed_by, decided_by,
                                 outcome, reason, judged_at)
    VALUES (p_run, '__approval:' || p_name, CASE WHEN v_refused THEN NULL ELSE p_payload END,
            p_now, v_consumed, p_by,
            CASE WHEN v_refused THEN 'refused' ELSE v_result END,
            v_reason, CASE WHEN v_result = 'held' THEN NULL ELSE p_now END);
    IF v_result IN ('accepted', 'held') THEN
        PERFORM @schema@.wake_run(p_run, p_now, p_now);
    END IF;
    RETURN v_result;
END $$;

-- A decision sent before the run reaches its gate is held, and judged when the gate is
-- reached. A run that completes or is cancelled first never reaches it, and the pass that
-- ended it may not even have seen the decision (it arrived while the pass ran). So the
-- run's end refuses what is still held, whoever ends it, in the transaction that ends it
-- (the trigger below). A failed run keeps them: a retry may still reach the gate.
CREATE OR REPLACE FUNCTION @schema@.refuse_held_decisions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.events
    SET outcome = 'refused', payload = NULL,
        reason = json_build_object('code', 'APPROVAL_RESOLVED',
                                    'message', 'the run ended before it reached the gate'),
        judged_at = NEW.updated_at
    WHERE run_id = NEW.id AND outcome = 'held';
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS runs_end_refuses_held ON @schema@.runs;
CREATE TRIGGER runs_end_refuses_held
AFTER UPDATE OF status ON @schema@.runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'cancelled', 'continued')
      AND OLD.status NOT IN ('completed', 'cancelled', 'continued'))
EXECUTE FUNCTION @schema@.refuse_held_decisions();

-- A request for a run (engine.request), stored p_status (with p_refusal for one refused on
-- arrival), which wakes the run. It is inserted under the run's row lock, so ids follow
-- commit order, the order a workflow takes requests in. Returns its id. SQLSTATE PLT02 /
-- PLT03 as lock_for_action raises them (p_live: the statuses a run may take one in).
CREATE OR REPLACE FUNCTION @schema@.send_request(
    p_run text, p_name text, p_data json, p_status text, p_refusal json,
    p_deadline timestamptz, p_live text[], p_now timestamptz
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM @schema@.lock_for_action(p_run, p_live);
    INSERT INTO @schema@.requests (run_id, name, data, status, refusal, created_at, deadline)
    VALUES (p_run, p_name, p_data, p_status, p_refusal, p_now, p_deadline)
    RETURNING id INTO v_id;
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
    RETURN v_id;
END $$;
