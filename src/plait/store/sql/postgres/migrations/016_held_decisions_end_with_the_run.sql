-- plait schema for PostgreSQL, version 16: a decision held for a gate is refused when its
-- run ends for good.
-- description: decisions still held when a run completes or is cancelled are refused
--
-- A decision sent before the run reaches its gate is held, and judged when the gate is
-- reached. A run that completes or is cancelled first never reaches it, and the pass
-- that ended it may not even have seen the decision (it arrived while the pass ran). So
-- the run's end refuses what is still held, whoever ends it, in the transaction that
-- ends it. A failed run keeps them: a retry may still reach the gate.
CREATE FUNCTION @schema@.refuse_held_decisions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.events
    SET outcome = 'refused',
        reason = jsonb_build_object('code', 'APPROVAL_RESOLVED',
                                    'message', 'the run ended before it reached the gate'),
        judged_at = NEW.updated_at
    WHERE run_id = NEW.id AND outcome = 'held';
    RETURN NULL;
END $$;

CREATE TRIGGER runs_end_refuses_held
AFTER UPDATE OF status ON @schema@.runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'cancelled') AND OLD.status NOT IN ('completed', 'cancelled'))
EXECUTE FUNCTION @schema@.refuse_held_decisions();
