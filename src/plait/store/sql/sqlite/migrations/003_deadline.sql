-- Run deadlines: the time by which a run must have ended, and the index the deadline loop
-- reads the live runs past it from.
-- description: run deadlines

ALTER TABLE plait_runs ADD COLUMN deadline_at REAL;

CREATE INDEX plait_runs_deadline ON plait_runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended');
