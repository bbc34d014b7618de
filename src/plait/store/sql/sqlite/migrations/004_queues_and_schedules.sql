-- plait schema for SQLite, version 4: queues with limits, delayed starts, schedules.
-- description: queued runs, queue admissions, de-duplication keys and schedules
--
-- A run started through a queue, or to start later, is inserted 'queued' with wake_at set
-- to the time it may start; admission moves it to 'running' and leases it in one
-- statement, inside the one write transaction SQLite allows at a time, so the counts it
-- reads cannot change under it.

ALTER TABLE plait_runs ADD COLUMN queue TEXT;
ALTER TABLE plait_runs ADD COLUMN queue_key TEXT;
ALTER TABLE plait_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE plait_runs ADD COLUMN dedup TEXT;
ALTER TABLE plait_runs ADD COLUMN scheduled_at REAL;
ALTER TABLE plait_runs ADD COLUMN admitted_at REAL;

CREATE INDEX IF NOT EXISTS plait_runs_queued ON plait_runs (wake_at) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS plait_runs_queue_active ON plait_runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended');
CREATE UNIQUE INDEX IF NOT EXISTS plait_runs_dedup ON plait_runs (dedup)
    WHERE dedup IS NOT NULL AND status IN ('queued', 'running', 'suspended');

CREATE TABLE IF NOT EXISTS plait_queue_admissions (
    queue TEXT NOT NULL,
    at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS plait_queue_admissions_at ON plait_queue_admissions (queue, at);

CREATE TABLE IF NOT EXISTS plait_schedules (
    name        TEXT PRIMARY KEY,
    workflow    TEXT NOT NULL,
    definition  TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'active',
    source      TEXT NOT NULL,
    owner       TEXT,
    next_tick   REAL,
    last_tick   REAL,
    last_run_id TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS plait_schedules_due ON plait_schedules (next_tick)
    WHERE status = 'active';
