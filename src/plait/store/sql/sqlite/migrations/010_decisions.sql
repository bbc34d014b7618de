-- A refused approval decision keeps who sent it, when and why, never its data: decisions
-- refused before this version drop theirs here, and the run's end drops the data of the
-- held decisions it refuses (the store drops it on every other path that refuses one).
-- description: refused decisions: no data

UPDATE plait_events SET payload = NULL WHERE outcome = 'refused' AND payload IS NOT NULL;

DROP TRIGGER plait_runs_end_refuses_held;
CREATE TRIGGER plait_runs_end_refuses_held
AFTER UPDATE OF status ON plait_runs
WHEN NEW.status IN ('completed', 'cancelled', 'continued')
    AND OLD.status NOT IN ('completed', 'cancelled', 'continued')
BEGIN
    UPDATE plait_events
    SET outcome = 'refused', payload = NULL,
        reason = json_object('code', 'APPROVAL_RESOLVED',
                             'message', 'the run ended before it reached the gate'),
        judged_at = NEW.updated_at
    WHERE run_id = NEW.id AND outcome = 'held';
END;
