-- Runs that continue as new (wf.continue_as_new): the links of a chain, and the status
-- continued among the ended statuses a prune walks and a run's end refuses held
-- decisions at.
-- description: runs continued as new: continued_from, continued_to; continued is an ended status

ALTER TABLE plait_runs ADD COLUMN continued_from TEXT;
ALTER TABLE plait_runs ADD COLUMN continued_to TEXT;

DROP INDEX plait_runs_ended;
CREATE INDEX plait_runs_ended ON plait_runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL;

DROP TRIGGER plait_runs_end_refuses_held;
CREATE TRIGGER plait_runs_end_refuses_held
AFTER UPDATE OF status ON plait_runs
WHEN NEW.status IN ('completed', 'cancelled', 'continued')
    AND OLD.status NOT IN ('completed', 'cancelled', 'continued')
BEGIN
    UPDATE plait_events
    SET outcome = 'refused',
        reason = json_object('code', 'APPROVAL_RESOLVED',
                             'message', 'the run ended before it reached the gate'),
        judged_at = NEW.updated_at
    WHERE run_id = NEW.id AND outcome = 'held';
END;
