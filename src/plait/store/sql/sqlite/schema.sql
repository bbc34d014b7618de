-- The current SQLite schema of plait: what the migrations (migrations/) build, in one
-- readable file. A test builds a database from this file and another through the
-- migrations, and finds them equal: a migration that changes a table or an index changes
-- this file too. Times are unix seconds (REAL); JSON is TEXT.

-- == tables ==================================================================================

-- A run of a workflow or a graph. Its row is also the orchestrator's queue: a pass is due
-- when wake_at <= now, and a worker drives it under a lease.
CREATE TABLE plait_runs (
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
    wake_at         REAL,                   -- when the next pass is due; NULL: not due
    wakeups         INTEGER NOT NULL DEFAULT 0,
    lease_owner     TEXT,
    lease_until     REAL,
    -- how often the idle sweep found the run with nothing to wake it (its back-off)
    idle_sweeps     INTEGER NOT NULL DEFAULT 0,
    -- a run started through a queue waits 'queued' (wake_at: when it may start) until it
    -- is admitted
    queue           TEXT,
    queue_key       TEXT,
    priority        INTEGER NOT NULL DEFAULT 0,
    dedup           TEXT,                   -- its de-duplication key, while it is live
    scheduled_at    REAL,                   -- the tick a schedule started it for
    admitted_at     REAL,                   -- when it left its queue
    forked_from     TEXT,                   -- the run a fork was made from
    -- the W3C trace context of the code that started it (JSON, the propagator's
    -- carrier), so every pass and step joins the starter's trace; NULL: not traced
    trace           TEXT,
    -- a chain of runs continued as new (wf.continue_as_new): the run this one continues,
    -- and the run that continues this one (plain ids: a pruned run's link may dangle)
    continued_from  TEXT,
    continued_to    TEXT,
    -- the time by which the run must have ended (``timeout=``); past it, the deadline
    -- loop fails it RUN_TIMEOUT wherever it is; NULL: no deadline
    deadline_at     REAL,
    -- the seconds from its start to deadline_at: a retry (or a resume past it) gives the
    -- run a deadline this far from then; NULL: no deadline
    timeout         REAL,
    -- its tags (a JSON object of str to str; plait.tags), mirrored in plait_run_tags;
    -- NULL: none
    tags            TEXT,
    -- a debounced start's key (engine.start(debounce=...)) while the run waits to start
    -- and may still take a later start's input; NULL: none, or its window has closed
    debounce_key    TEXT,
    -- the latest start a later debounced start may move it to (its first start plus
    -- debounce_max); NULL: no limit
    debounce_until  REAL
);

-- A step of a run, one row per step key, with its latest attempt on the row.
CREATE TABLE plait_steps (
    run_id           TEXT NOT NULL,
    key              TEXT NOT NULL,
    seq              INTEGER NOT NULL,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL,     -- do, child, sleep, suspend, event, value, on_error, node
    function         TEXT,
    status           TEXT NOT NULL,
    input            TEXT,
    output           TEXT,
    error            TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    retries          INTEGER NOT NULL DEFAULT 0,
    retry_delay      REAL,              -- NULL: exponential
    timeout          REAL,
    invocation_id    TEXT NOT NULL,
    child_run_id     TEXT,
    branch           TEXT,
    from_key         TEXT,
    queued           INTEGER NOT NULL DEFAULT 0,
    wake_at          REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    worker           TEXT,
    attempt_status   TEXT,              -- NULL: no attempt on the row
    attempt_error    TEXT,
    attempt_started  REAL,
    attempt_finished REAL,
    -- the order the workflow first saw the step's outcome in (replay hands outcomes back
    -- in that order); NULL: not seen yet
    delivered        INTEGER,
    -- a retried run's fresh retry budget counts the failures after this many
    retried_failures INTEGER NOT NULL DEFAULT 0,
    -- the keys of the steps whose outcomes the reaching task had received when it reached
    -- this one (a JSON list), written with the step's first write; NULL for graph steps
    reached_after    TEXT,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- A step's earlier attempts: one moves here from its step row when the next one starts.
CREATE TABLE plait_attempts (
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

-- Queued steps waiting for (or held by) a step worker; a row is deleted when its step ends.
CREATE TABLE plait_jobs (
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

-- Durable timers: sleeps, retry back-offs, event timeouts.
CREATE TABLE plait_timers (
    run_id   TEXT NOT NULL,
    step_key TEXT NOT NULL,
    purpose  TEXT NOT NULL,
    wake_at  REAL NOT NULL,
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;

-- Events sent to runs, and decisions on approval gates (name "__approval:<gate>"), with
-- who sent a decision and what became of it: held (the gate is not reached yet), accepted
-- or refused (reason: a JSON record). Ordinary events leave those columns empty.
CREATE TABLE plait_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT,
    created_at  REAL NOT NULL,
    consumed_by TEXT,
    decided_by  TEXT,
    outcome     TEXT,
    reason      TEXT,
    judged_at   REAL,
    -- the sender's de-duplication key: a run takes each key once (held or consumed)
    dedup       TEXT
);

-- Requests sent to runs (engine.request), each answered once: sent (waiting for the
-- workflow to take it, oldest first), taken (by the wait step taken_by), replied (reply:
-- JSON), refused (refusal: a JSON record), withdrawn (its sender stopped waiting at
-- deadline before the workflow took it).
CREATE TABLE plait_requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    data        TEXT,
    status      TEXT NOT NULL,
    taken_by    TEXT,
    reply       TEXT,
    refusal     TEXT,
    created_at  REAL NOT NULL,
    deadline    REAL NOT NULL,
    answered_at REAL
);

-- A run's named state (wf.state).
CREATE TABLE plait_state (
    run_id TEXT NOT NULL,
    name   TEXT NOT NULL,
    value  TEXT,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;

-- Values a workflow publishes (wf.set_value): the last write of each key wins.
CREATE TABLE plait_values (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- A run's tags, one row per (key, value), written with the run's tags column: the index
-- on (key, value, created time, run_id) finds the runs of a tag (list_runs(tags=...)) in
-- the list's order (run_created_at is the run's created_at).
CREATE TABLE plait_run_tags (
    run_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    run_created_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- One entry of a run's stream (wf.stream, ctx.stream), offsets dense from 0 in each
-- stream: 'data' (value: the JSON written; step_key and attempt: the step attempt that
-- wrote it, NULL for the workflow's own writes), 'reset' (step_key and attempt: the
-- attempt whose entries readers drop) or 'end'.
CREATE TABLE plait_stream_entries (
    run_id   TEXT NOT NULL,
    stream   TEXT NOT NULL,
    "offset" INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    value    TEXT,
    step_key TEXT,
    attempt  INTEGER,
    at       REAL NOT NULL,
    PRIMARY KEY (run_id, stream, "offset")
) WITHOUT ROWID;

-- The versions of each workflow and graph, and who registered each graph version.
CREATE TABLE plait_workflow_versions (
    workflow      TEXT NOT NULL,
    version       TEXT NOT NULL,
    kind          TEXT NOT NULL,        -- 'workflow' or 'graph'
    definition    TEXT,                 -- graphs: the definition; code workflows: NULL
    status        TEXT NOT NULL DEFAULT 'active',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    registered_by TEXT,
    PRIMARY KEY (workflow, version)
) WITHOUT ROWID;

-- A graph name belongs to whoever registered it first (NULL: the app's code or trusted
-- code); only that user may register more versions of it.
CREATE TABLE plait_graph_owners (
    workflow   TEXT PRIMARY KEY,
    owner      TEXT,
    created_at REAL NOT NULL
) WITHOUT ROWID;

-- The admissions of queues with a rate, for the sliding window.
CREATE TABLE plait_queue_admissions (
    queue TEXT NOT NULL,
    at    REAL NOT NULL
);

-- Fair queues: per key, the virtual time its last admission finished at (what it has
-- been served, each admission costing TURN / weight), and per queue the clock: the
-- virtual time the last admission started at. A waiting run's turn is
-- max(clock, finish) + its rank within its key times the key's cost; the smallest goes
-- first. A key whose finish the clock has passed is forgotten (it is the same as none:
-- a key coming back after a pause starts at the clock, with no credit saved up). Runs
-- without a key share the key ''.
CREATE TABLE plait_queue_turns (
    queue     TEXT NOT NULL,
    queue_key TEXT NOT NULL,
    finish    INTEGER NOT NULL,
    PRIMARY KEY (queue, queue_key)
) WITHOUT ROWID;

CREATE TABLE plait_queue_clocks (
    queue TEXT PRIMARY KEY,
    clock INTEGER NOT NULL
) WITHOUT ROWID;

-- Schedules: declared in the app's code or made at run time.
CREATE TABLE plait_schedules (
    name        TEXT PRIMARY KEY,
    workflow    TEXT NOT NULL,
    definition  TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'active',   -- active | paused
    source      TEXT NOT NULL,          -- app (declared in code) | api (made at run time)
    owner       TEXT,
    next_tick   REAL,
    last_tick   REAL,
    last_run_id TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
) WITHOUT ROWID;

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

-- a queue's limits as the engine of an app that declares it stored them when it opened
CREATE TABLE plait_queue_limits (
    name           TEXT PRIMARY KEY,
    concurrency    INTEGER,
    per_key        INTEGER,
    rate           INTEGER,
    rate_window    REAL,
    budget         TEXT NOT NULL,      -- JSON array of [unit, amount, window in seconds]
    budget_per_key INTEGER NOT NULL,
    fair           TEXT,               -- JSON [turn, [[key, cost], ...]]; NULL: not fair
    app            TEXT NOT NULL,
    updated_at     REAL NOT NULL
) WITHOUT ROWID;

-- what a step attempt reported spent (ctx.spend), counted against a queue (and a key)
CREATE TABLE plait_spend (
    queue     TEXT NOT NULL,
    queue_key TEXT,
    unit      TEXT NOT NULL,
    amount    REAL NOT NULL,
    at        REAL NOT NULL,
    run_id    TEXT NOT NULL,
    step_key  TEXT NOT NULL,
    attempt   INTEGER NOT NULL
);

-- == indexes =================================================================================

CREATE INDEX plait_runs_due ON plait_runs (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX plait_runs_list ON plait_runs (created_at DESC);
CREATE INDEX plait_runs_workflow ON plait_runs (workflow, status, created_at DESC);
CREATE INDEX plait_runs_status ON plait_runs (status, created_at DESC);
CREATE INDEX plait_runs_parent ON plait_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX plait_runs_lease ON plait_runs (lease_owner) WHERE lease_owner IS NOT NULL;
CREATE INDEX plait_runs_queued ON plait_runs (wake_at) WHERE status = 'queued';
-- running runs nothing will wake, for the idle sweep
CREATE INDEX plait_runs_idle ON plait_runs (updated_at)
    WHERE status = 'running' AND wake_at IS NULL AND lease_owner IS NULL;
-- ended top-level runs oldest first: what a prune walks through, batch by batch
CREATE INDEX plait_runs_ended ON plait_runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL;
-- live runs with a deadline, soonest first: what the deadline loop reads
CREATE INDEX plait_runs_deadline ON plait_runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended');
-- open and closed approval gates across runs (list_approvals), without a scan of steps
CREATE INDEX plait_steps_gates ON plait_steps (status, created_at) WHERE kind = 'approval';
CREATE INDEX plait_jobs_due ON plait_jobs (available_at);
CREATE INDEX plait_timers_due ON plait_timers (wake_at);
CREATE INDEX plait_events_open ON plait_events (run_id, name) WHERE consumed_by IS NULL;
-- a run's decisions are read, and a pruned run's events deleted, by run
CREATE INDEX plait_events_run ON plait_events (run_id);
-- the requests a pass may take, oldest first; a pruned run's requests go by run
CREATE INDEX plait_requests_sent ON plait_requests (run_id, id) WHERE status = 'sent';
CREATE INDEX plait_requests_run ON plait_requests (run_id);
CREATE INDEX plait_run_tags_pair ON plait_run_tags (key, value, run_created_at DESC, run_id);
-- a run takes an event of a de-duplication key once, held or consumed: a second send of
-- the key stores nothing (the insert's conflict), whichever process sends it
CREATE UNIQUE INDEX plait_events_dedup ON plait_events (run_id, dedup) WHERE dedup IS NOT NULL;
CREATE INDEX plait_queue_admissions_at ON plait_queue_admissions (queue, at);
CREATE INDEX plait_spend_at ON plait_spend (queue, at);
CREATE INDEX plait_schedules_due ON plait_schedules (next_tick) WHERE status = 'active';
-- the entries of one step attempt (a reset finds the streams it wrote to)
CREATE INDEX plait_stream_entries_attempt ON plait_stream_entries (run_id, step_key, attempt)
    WHERE step_key IS NOT NULL;
-- the first entry of each stream: the run's page counts its streams in its marks
CREATE INDEX plait_stream_entries_first ON plait_stream_entries (run_id) WHERE "offset" = 0;
-- made again by migration 008 (paused runs hold their slot and key), so created last
CREATE INDEX plait_runs_queue_active ON plait_runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended', 'paused');
-- one run per workflow, debounce key and owner waits to start; a run whose start time has
-- passed leaves the window (its key is cleared) before the next start of the key inserts
CREATE UNIQUE INDEX plait_runs_debounce ON plait_runs (workflow, debounce_key, coalesce(owner, ''))
    WHERE debounce_key IS NOT NULL AND status = 'queued';
-- a de-duplication key belongs to one live run at a time; it is free again once that run
-- has ended (the row leaves this partial index); a run needs_attention keeps it (made
-- again by migration 014)
CREATE UNIQUE INDEX plait_runs_dedup ON plait_runs (dedup)
    WHERE dedup IS NOT NULL
        AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention');

-- == triggers ================================================================================

-- A decision sent before the run reaches its gate is held, and judged when the gate is
-- reached. A run that completes, is cancelled or continues as new first never reaches it,
-- and the pass that ended it may not even have seen the decision (it arrived while the
-- pass ran). So the run's end refuses what is still held, whoever ends it, and drops
-- its data (a refused decision keeps who sent it, when and why). A failed run keeps
-- them: a retry may still reach the gate.
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

-- An attempt that ends failed, interrupted or cancelled resets what it wrote: readers drop
-- its entries. Whoever ends it (a pass, a step worker, a takeover, a cancel), the reset
-- follows in the same transaction. Every statement that ends an attempt that way sets its
-- error, so the trigger watches attempt_error: the end of a succeeded attempt leaves that
-- column alone and runs no trigger program (SQLite enters one, WHEN clause and all, for
-- every update of a watched column: about a tenth of a step's instructions). Changed by
-- migration 015.
CREATE TRIGGER plait_steps_attempt_resets_streams
AFTER UPDATE OF attempt_error ON plait_steps
WHEN OLD.attempt_status = 'running'
    AND NEW.attempt_status IN ('failed', 'interrupted', 'cancelled')
BEGIN
    INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key,
                                      attempt, at)
    SELECT NEW.run_id, w.stream,
        (SELECT max(e."offset") + 1 FROM plait_stream_entries AS e
         WHERE e.run_id = NEW.run_id AND e.stream = w.stream),
        'reset', NULL, NEW.key, NEW.attempts, NEW.updated_at
    FROM (SELECT DISTINCT stream FROM plait_stream_entries
          WHERE run_id = NEW.run_id AND step_key = NEW.key AND attempt = NEW.attempts
              AND kind = 'data') AS w;
END;

-- A run's end ends each of its streams, whoever ends it.
CREATE TRIGGER plait_runs_end_ends_streams
AFTER UPDATE OF status ON plait_runs
WHEN NEW.status IN ('completed', 'failed', 'cancelled', 'continued')
    AND OLD.status NOT IN ('completed', 'failed', 'cancelled', 'continued')
BEGIN
    INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key,
                                      attempt, at)
    SELECT NEW.id, stream, max("offset") + 1, 'end', NULL, NULL, NULL, NEW.updated_at
    FROM plait_stream_entries WHERE run_id = NEW.id GROUP BY stream;
END;
