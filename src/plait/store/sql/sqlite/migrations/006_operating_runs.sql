-- plait schema for SQLite, version 6: approvals, forks, published values, retention.
-- description: approval decisions, forked runs, published values, indexes for pruning
--
-- A decision on an approval gate is a message to its run, kept in plait_events beside
-- the events (name "__approval:<gate>"), with who sent it and what became of it: held
-- (the gate is not reached yet), accepted or refused (reason: a JSON record). Ordinary
-- events leave these columns empty.

ALTER TABLE plait_events ADD COLUMN decided_by TEXT;
ALTER TABLE plait_events ADD COLUMN outcome TEXT;
ALTER TABLE plait_events ADD COLUMN reason TEXT;
ALTER TABLE plait_events ADD COLUMN judged_at REAL;
-- a run's decisions are read, and a pruned run's events deleted, by run
CREATE INDEX IF NOT EXISTS plait_events_run ON plait_events (run_id);

-- open and closed approval gates across runs (list_approvals), without a scan of steps
CREATE INDEX IF NOT EXISTS plait_steps_gates ON plait_steps (status, created_at)
    WHERE kind = 'approval';

-- the run a fork was made from
ALTER TABLE plait_runs ADD COLUMN forked_from TEXT;

-- values a workflow publishes (wf.set_value): the last write of each key wins
CREATE TABLE IF NOT EXISTS plait_values (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- ended top-level runs oldest first: what a prune walks through, batch by batch
CREATE INDEX IF NOT EXISTS plait_runs_ended ON plait_runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled') AND parent_run_id IS NULL;
