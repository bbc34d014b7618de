-- Run deadlines: the time by which a run must have ended, the index the deadline loop
-- reads the live runs past it from, and the deadline a new run is created with.
-- description: run deadlines

ALTER TABLE @schema@.runs ADD COLUMN deadline_at timestamptz;

CREATE INDEX runs_deadline ON @schema@.runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended');

ALTER TYPE @schema@.new_run ADD ATTRIBUTE deadline_at timestamptz;
