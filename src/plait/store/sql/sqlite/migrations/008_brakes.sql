-- Brakes and the worker registry: a workflow or a queue paused for every process (a run
-- of it waits, status 'paused', until it is resumed), and the workers that record
-- themselves while they work.
-- description: brakes, workers, paused runs hold their queue slot and dedup key

-- a paused workflow (kind 'workflow') or queue (kind 'queue'): claims leave its runs
CREATE TABLE plait_brakes (
    kind      TEXT NOT NULL,
    name      TEXT NOT NULL,
    paused_at REAL NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;

-- a worker process, as it recorded itself; seen_at moves with its heartbeat
CREATE TABLE plait_workers (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    app        TEXT NOT NULL,
    version    TEXT NOT NULL,
    queues     TEXT,                -- JSON array; NULL: every queue
    workflows  TEXT NOT NULL,       -- JSON array of the workflows it works
    started_at REAL NOT NULL,
    seen_at    REAL NOT NULL
) WITHOUT ROWID;

-- a paused run holds its queue slot and its de-duplication key, as a suspended one does
DROP INDEX plait_runs_queue_active;
CREATE INDEX plait_runs_queue_active ON plait_runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended', 'paused');
DROP INDEX plait_runs_dedup;
CREATE UNIQUE INDEX plait_runs_dedup ON plait_runs (dedup)
    WHERE dedup IS NOT NULL AND status IN ('queued', 'running', 'suspended', 'paused');
