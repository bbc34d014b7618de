-- Brakes and the worker registry: a workflow or a queue paused for every process (a run
-- of it waits, status 'paused', until it is resumed), and the workers that record
-- themselves while they work.
-- description: brakes, workers, paused runs hold their queue slot and dedup key

-- a paused workflow (kind 'workflow') or queue (kind 'queue'): claims leave its runs
CREATE TABLE @schema@.brakes (
    kind      text NOT NULL,
    name      text NOT NULL,
    paused_at timestamptz NOT NULL,
    PRIMARY KEY (kind, name)
);

-- a worker process, as it recorded itself; seen_at moves with its heartbeat
CREATE TABLE @schema@.workers (
    id         text PRIMARY KEY,
    host       text NOT NULL,
    pid        integer NOT NULL,
    app        text NOT NULL,
    version    text NOT NULL,
    queues     text,                -- JSON array; NULL: every queue
    workflows  text NOT NULL,       -- JSON array of the workflows it works
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL
);

-- a paused run holds its queue slot and its de-duplication key, as a suspended one does
DROP INDEX @schema@.runs_queue_active;
CREATE INDEX runs_queue_active ON @schema@.runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended', 'paused');
DROP INDEX @schema@.runs_dedup;
CREATE UNIQUE INDEX runs_dedup ON @schema@.runs (dedup)
    WHERE dedup IS NOT NULL AND status IN ('queued', 'running', 'suspended', 'paused');
