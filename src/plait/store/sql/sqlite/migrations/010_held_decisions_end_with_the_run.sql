-- plait schema for SQLite, version 10: a decision held for a gate is refused when its run
-- ends for good.
-- description: decisions still held when a run completes or is cancelled are refused
--
-- A decision sent before the run reaches its gate is held, and judged when the gate is
-- reached. A run that completes or is cancelled first never reaches it, and the pass
-- that ended it may not even have seen the decision (it arrived while the pass ran). So
-- the run's end refuses what is still held, whoever ends it. A failed run keeps them: a
-- retry may still reach the gate.
CREATE TRIGGER IF NOT EXISTS plait_runs_end_refuses_held
AFTER UPDATE OF status ON plait_runs
WHEN NEW.status IN ('completed', 'cancelled') AND OLD.status NOT IN ('completed', 'cancelled')
BEGIN
    UPDATE plait_events
    SET outcome = 'refused',
        reason = json_object('code', 'APPROVAL_RESOLVED',
                             'message', 'the run ended before it reached the gate'),
        judged_at = NEW.updated_at
    WHERE run_id = NEW.id AND outcome = 'held';
END;
