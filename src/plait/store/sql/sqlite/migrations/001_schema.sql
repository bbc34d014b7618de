-- plait schema for SQLite, version 1. Times are unix seconds (REAL); JSON is TEXT.
-- description: runs, steps, attempts, jobs, timers, events, state, workflow versions

CREATE TABLE IF NOT EXISTS plait_runs (
    id              TEXT PRIMARY KEY,
    workflow        TEXT NOT NULL,
    kind            TEXT NOT NULL DEFAULT 'workflow',   -- 'workflow' (code) or 'graph'
    version         TEXT,
    status          TEXT NOT NULL,
    input           TEXT,
    output          TEXT,
    error           TEXT,
    parent_run_id   TEXT,
    parent_step_key TEXT,
    owner           TEXT,
    start_node      TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    -- the orchestrator queue lives on the run row: a pass is due when wake_at <= now
    wake_at         REAL,
    wakeups         INTEGER NOT NULL DEFAULT 0,
    lease_owner     TEXT,
    lease_until     REAL,
    idle_sweeps     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS plait_runs_due ON plait_runs (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS plait_runs_list ON plait_runs (created_at DESC);
CREATE INDEX IF NOT EXISTS plait_runs_workflow ON plait_runs (workflow, status, created_at DESC);
CREATE INDEX IF NOT EXISTS plait_runs_status ON plait_runs (status, created_at DESC);
CREATE INDEX IF NOT EXISTS plait_runs_parent ON plait_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS plait_runs_lease ON plait_runs (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE IF NOT EXISTS plait_steps (
    run_id        TEXT NOT NULL,
    key           TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL,        -- do, child, sleep, suspend, event, value, on_error, node
    function      TEXT,
    status        TEXT NOT NULL,
    input         TEXT,
    output        TEXT,
    error         TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    failures      INTEGER NOT NULL DEFAULT 0,
    retries       INTEGER NOT NULL DEFAULT 0,
    retry_delay   REAL,                 -- NULL: exponential
    timeout       REAL,
    invocation_id TEXT NOT NULL,
    child_run_id  TEXT,
    branch        TEXT,
    from_key      TEXT,
    queued        INTEGER NOT NULL DEFAULT 0,
    wake_at       REAL,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS plait_attempts (
    run_id      TEXT NOT NULL,
    key         TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    status      TEXT NOT NULL,          -- running, succeeded, failed, interrupted, cancelled
    output      TEXT,
    error       TEXT,
    worker      TEXT,
    started_at  REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (run_id, key, attempt)
) WITHOUT ROWID;

-- queued steps waiting for (or held by) a step worker
CREATE TABLE IF NOT EXISTS plait_jobs (
    run_id       TEXT NOT NULL,
    step_key     TEXT NOT NULL,
    function     TEXT NOT NULL,
    available_at REAL NOT NULL,
    lease_owner  TEXT,
    lease_until  REAL,
    deliveries   INTEGER NOT NULL DEFAULT 0,
    created_at   REAL NOT NULL,
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX IF NOT EXISTS plait_jobs_due ON plait_jobs (available_at);

-- durable timers: sleeps, retry back-offs, event timeouts
CREATE TABLE IF NOT EXISTS plait_timers (
    run_id   TEXT NOT NULL,
    step_key TEXT NOT NULL,
    purpose  TEXT NOT NULL,
    wake_at  REAL NOT NULL,
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS plait_timers_due ON plait_timers (wake_at);

CREATE TABLE IF NOT EXISTS plait_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT,
    created_at  REAL NOT NULL,
    consumed_by TEXT
);
CREATE INDEX IF NOT EXISTS plait_events_open ON plait_events (run_id, name) WHERE consumed_by IS NULL;

CREATE TABLE IF NOT EXISTS plait_state (
    run_id TEXT NOT NULL,
    name   TEXT NOT NULL,
    value  TEXT,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS plait_workflow_versions (
    workflow   TEXT NOT NULL,
    version    TEXT NOT NULL,
    kind       TEXT NOT NULL,           -- 'workflow' or 'graph'
    definition TEXT,                    -- graphs: the definition; code workflows: NULL
    status     TEXT NOT NULL DEFAULT 'active',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (workflow, version)
) WITHOUT ROWID;
