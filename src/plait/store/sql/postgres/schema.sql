-- The current PostgreSQL schema of plait: what the migrations (migrations/) build, in one
-- readable file. A test builds a database from this file and ../functions/ and another
-- through the migrations, and finds them equal: a migration that changes a table or an
-- index changes this file too. The functions that move the rows are in functions/, one
-- file per concern.
--
-- @schema@ is the quoted schema name. Times are timestamptz (the store converts them to
-- and from unix seconds at the edge); durations (retry_delay, timeout) are seconds in
-- double precision; JSON is json, kept as plait wrote it (jsonb would
-- change numbers: 1e300 into a 301-digit int, -0.0 into 0).

-- == runs ====================================================================================

-- A run of a workflow or a graph. Its row is also the orchestrator's queue: a pass is due
-- when wake_at <= now, and a worker drives it under a lease.
CREATE SEQUENCE @schema@.runs_start_seq;
CREATE TABLE @schema@.runs (
    id              text PRIMARY KEY,
    workflow        text NOT NULL,
    kind            text NOT NULL DEFAULT 'workflow',   -- 'workflow' (code) or 'graph'
    version         text,
    status          text NOT NULL,
    input           json,
    output          json,
    error           json,
    parent_run_id   text,
    parent_step_key text,
    owner           text,
    start_node      text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    wake_at         timestamptz,            -- when the next pass is due; NULL: not due
    wakeups         bigint NOT NULL DEFAULT 0,
    lease_owner     text,
    lease_until     timestamptz,
    -- how often the idle sweep found the run with nothing to wake it (its back-off)
    idle_sweeps     integer NOT NULL DEFAULT 0,
    -- a run started through a queue waits 'queued' (wake_at: when it may start) until
    -- admit_runs admits it
    queue           text,
    queue_key       text,
    priority        integer NOT NULL DEFAULT 0,
    dedup           text,                   -- its de-duplication key, while it is live
    scheduled_at    timestamptz,            -- the tick a schedule started it for
    admitted_at     timestamptz,            -- when it left its queue
    forked_from     text,                   -- the run a fork was made from
    -- the W3C trace context of the code that started it (JSON, the propagator's
    -- carrier), so every pass and step joins the starter's trace; NULL: not traced
    trace           text,
    -- the order runs were inserted in: admission breaks ties with it (the children one
    -- pass starts share an instant, and their ids come in no order)
    start_seq       bigint DEFAULT nextval('@schema@.runs_start_seq'),
    -- a chain of runs continued as new (wf.continue_as_new): the run this one continues,
    -- and the run that continues this one (plain ids: a pruned run's link may dangle)
    continued_from  text,
    continued_to    text,
    -- the time by which the run must have ended (``timeout=``); past it, the deadline
    -- loop fails it RUN_TIMEOUT wherever it is; NULL: no deadline
    deadline_at     timestamptz,
    -- the seconds from its start to deadline_at: a retry (or a resume past it) gives the
    -- run a deadline this far from then; NULL: no deadline
    timeout         double precision,
    -- its tags (a JSON object of str to str; plait.tags), mirrored in run_tags; NULL: none
    tags            json,
    -- a debounced start's key (engine.start(debounce=...)) while the run waits to start
    -- and may still take a later start's input; NULL: none, or its window has closed
    debounce_key    text,
    -- the latest start a later debounced start may move it to (its first start plus
    -- debounce_max); NULL: no limit
    debounce_until  timestamptz
) WITH (fillfactor = 80);
ALTER SEQUENCE @schema@.runs_start_seq OWNED BY @schema@.runs.start_seq;

-- A step of a run, one row per step key, with its latest attempt on the row. Column order
-- is plait.store.rows.StepRow's field order (the store passes step rows as this table's
-- row type), then the attempt's columns, which the store sends empty and never reads back.
CREATE TABLE @schema@.steps (
    run_id           text NOT NULL,
    key              text NOT NULL,
    seq              integer NOT NULL,
    name             text NOT NULL,
    kind             text NOT NULL,     -- do, child, sleep, suspend, event, value, on_error, node
    function         text,
    status           text NOT NULL,
    input            json,
    output           json,
    error            json,
    attempts         integer NOT NULL DEFAULT 0,
    failures         integer NOT NULL DEFAULT 0,
    retries          integer NOT NULL DEFAULT 0,
    retry_delay      double precision,  -- NULL: exponential
    timeout          double precision,
    invocation_id    text NOT NULL,
    child_run_id     text,
    branch           text,
    from_key         text,
    queued           boolean NOT NULL DEFAULT false,
    wake_at          timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    -- the order the workflow first saw the step's outcome in (replay hands outcomes back
    -- in that order); NULL: not seen yet
    delivered        integer,
    -- a retried run's fresh retry budget counts the failures after this many
    retried_failures integer NOT NULL DEFAULT 0,
    -- the keys of the steps whose outcomes the reaching task had received when it reached
    -- this one (a JSON list), written with the step's first write; NULL for graph steps
    reached_after    json,
    worker           text,
    attempt_status   text,              -- NULL: no attempt on the row
    attempt_error    json,
    attempt_started  timestamptz,
    attempt_finished timestamptz,
    PRIMARY KEY (run_id, key)
) WITH (fillfactor = 80);

-- A step's earlier attempts: one moves here from its step row when the next one starts.
CREATE TABLE @schema@.attempts (
    run_id      text NOT NULL,
    key         text NOT NULL,
    attempt     integer NOT NULL,
    status      text NOT NULL,          -- running, succeeded, failed, interrupted, cancelled
    output      json,
    error       json,
    worker      text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (run_id, key, attempt)
);

-- Queued steps waiting for (or held by) a step worker; a row is deleted when its step ends.
CREATE TABLE @schema@.jobs (
    run_id       text NOT NULL,
    step_key     text NOT NULL,
    function     text NOT NULL,
    available_at timestamptz NOT NULL,
    lease_owner  text,
    lease_until  timestamptz,
    deliveries   integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, step_key)
) WITH (fillfactor = 80);

-- Durable timers: sleeps, retry back-offs, event timeouts.
CREATE TABLE @schema@.timers (
    run_id   text NOT NULL,
    step_key text NOT NULL,
    purpose  text NOT NULL,
    wake_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, step_key)
);

-- Events sent to runs, and decisions on approval gates (name '__approval:<gate>'), with
-- who sent a decision and what became of it: held (the gate is not reached yet), accepted
-- or refused (reason: a JSON record). Ordinary events leave those columns empty.
CREATE TABLE @schema@.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    name        text NOT NULL,
    payload     json,
    created_at  timestamptz NOT NULL,
    consumed_by text,
    decided_by  text,
    outcome     text,
    reason      json,
    judged_at   timestamptz,
    -- the sender's de-duplication key: a run takes each key once (held or consumed)
    dedup       text
);

-- Requests sent to runs (engine.request), each answered once: sent (waiting for the
-- workflow to take it, oldest first), taken (by the wait step taken_by), replied (reply),
-- refused (refusal: a JSON record), withdrawn (its sender stopped waiting at deadline
-- before the workflow took it). Ids follow commit order: a request is inserted under its
-- run's row lock.
CREATE TABLE @schema@.requests (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    name        text NOT NULL,
    data        json,
    status      text NOT NULL,
    taken_by    text,
    reply       json,
    refusal     json,
    created_at  timestamptz NOT NULL,
    deadline    timestamptz NOT NULL,
    answered_at timestamptz
);

-- A run's named state (wf.state).
CREATE TABLE @schema@.state (
    run_id text NOT NULL,
    name   text NOT NULL,
    value  json,
    PRIMARY KEY (run_id, name)
);

-- Values a workflow publishes (wf.set_value): the last write of each key wins.
CREATE TABLE @schema@.run_values (
    run_id     text NOT NULL,
    key        text NOT NULL,
    value      json,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- A run's tags, one row per (key, value), written with the run's tags column: the index
-- on (key, value, run_id) finds the runs of a tag (list_runs(tags=...)).
CREATE TABLE @schema@.run_tags (
    run_id text NOT NULL,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- One entry of a run's stream: 'data' (value: the JSON written; step_key and attempt: the
-- step attempt that wrote it, NULL for the workflow's own writes), 'reset' (step_key and
-- attempt: the attempt whose entries readers drop) or 'end'.
CREATE TABLE @schema@.stream_entries (
    run_id   text NOT NULL,
    stream   text NOT NULL,
    "offset" integer NOT NULL,
    kind     text NOT NULL,
    value    json,
    step_key text,
    attempt  integer,
    at       timestamptz NOT NULL,
    PRIMARY KEY (run_id, stream, "offset")
);

-- The versions of each workflow and graph, and who registered each graph version.
CREATE TABLE @schema@.workflow_versions (
    workflow      text NOT NULL,
    version       text NOT NULL,
    kind          text NOT NULL,        -- 'workflow' or 'graph'
    definition    json,                -- graphs: the definition; code workflows: NULL
    status        text NOT NULL DEFAULT 'active',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    registered_by text,
    PRIMARY KEY (workflow, version)
);

-- A graph name belongs to whoever registered it first (NULL: the app's code or trusted
-- code); only that user may register more versions of it.
CREATE TABLE @schema@.graph_owners (
    workflow   text PRIMARY KEY,
    owner      text,
    created_at timestamptz NOT NULL
);

-- The admissions of queues with a rate, for the sliding window; rows older than the window
-- are deleted by the admissions that follow them.
CREATE TABLE @schema@.queue_admissions (
    queue text NOT NULL,
    at    timestamptz NOT NULL
);

-- Fair queues: per key, the virtual time its last admission finished at (what it has
-- been served, each admission costing TURN / weight), and per queue the clock: the
-- virtual time the last admission started at. A waiting run's turn is
-- max(clock, finish) + its rank within its key times the key's cost; the smallest goes
-- first. A key whose finish the clock has passed is forgotten (it is the same as none:
-- a key coming back after a pause starts at the clock, with no credit saved up). Runs
-- without a key share the key ''.
CREATE TABLE @schema@.queue_turns (
    queue     text NOT NULL,
    queue_key text NOT NULL,
    finish    bigint NOT NULL,
    PRIMARY KEY (queue, queue_key)
);

CREATE TABLE @schema@.queue_clocks (
    queue text PRIMARY KEY,
    clock bigint NOT NULL
);

-- Schedules: declared in the app's code or made at run time.
CREATE TABLE @schema@.schedules (
    name        text PRIMARY KEY,
    workflow    text NOT NULL,
    definition  json NOT NULL,         -- plait.schedules.ScheduleSpec.definition()
    status      text NOT NULL DEFAULT 'active',   -- active | paused
    source      text NOT NULL,          -- app (declared in code) | api (made at run time)
    owner       text,
    next_tick   timestamptz,
    last_tick   timestamptz,
    last_run_id text,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- == what the store sends ====================================================================

-- A new run (plait.store.rows.NewRun).
CREATE TYPE @schema@.new_run AS (
    id              text,
    workflow        text,
    kind            text,
    version         text,
    input           json,
    owner           text,
    parent_run_id   text,
    parent_step_key text,
    start_node      text,
    lease_owner     text,
    lease_seconds   double precision,
    status          text,
    queue           text,
    queue_key       text,
    priority        integer,
    dedup           text,
    not_before      timestamptz,
    scheduled_at    timestamptz,
    trace           text,
    deadline_at     timestamptz,
    timeout         double precision,
    tags            json,
    debounce_key    text,
    debounce_until  timestamptz
);

-- How a parent's step ends when its child run ends (plait.store.ops.StepEnd).
CREATE TYPE @schema@.step_end AS (
    status   text,      -- succeeded | failed
    output   json,
    error    json,
    failures integer    -- the failures it adds to the step's count
);

-- How a cancel ends its runs' steps in flight (plait.store.ops.CancelCut): the step's
-- status, its open attempt's, and the status of an attempt still open.
CREATE TYPE @schema@.cancel_cut AS (
    step         text,
    attempt      text,
    open_attempt text
);

-- One write of a pass (plait.store.ops.Op); which fields are set depends on kind. An
-- end_run op carries in parent the end of the parent's step that waits for the run, in
-- cut (with cancel_children) how a cancel ends the steps in flight, and in run the run
-- that continues it as new.
CREATE TYPE @schema@.op AS (
    kind     text,
    step     @schema@.steps,
    attempt  integer,
    worker   text,
    status   text,
    output   json,
    error    json,
    key      text,
    purpose  text,
    at       timestamptz,
    function text,
    event_id bigint,
    run      @schema@.new_run,
    name     text,
    parent   @schema@.step_end,
    cut      @schema@.cancel_cut
);

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

-- a queue's limits as the engine of an app that declares it stored them when it opened
CREATE TABLE @schema@.queue_limits (
    name           text PRIMARY KEY,
    concurrency    integer,
    per_key        integer,
    rate           integer,
    rate_window    float8,
    budget         text NOT NULL,      -- JSON array of [unit, amount, window in seconds]
    budget_per_key boolean NOT NULL,
    fair           text,               -- JSON [turn, [[key, cost], ...]]; NULL: not fair
    app            text NOT NULL,
    updated_at     timestamptz NOT NULL
);

-- what a step attempt reported spent (ctx.spend), counted against a queue (and a key)
CREATE TABLE @schema@.spend (
    queue     text NOT NULL,
    queue_key text,
    unit      text NOT NULL,
    amount    float8 NOT NULL,
    at        timestamptz NOT NULL,
    run_id    text NOT NULL,
    step_key  text NOT NULL,
    attempt   integer NOT NULL
);

-- == indexes =================================================================================

-- No index holds a run's lease nor a step's status: taking or giving back a lease, and a
-- step's end, change no indexed column, so they are heap-only updates (fillfactor 80
-- leaves them the room).
CREATE INDEX runs_due ON @schema@.runs (wake_at) WHERE wake_at IS NOT NULL;
-- running runs nothing will wake, for the idle sweep
CREATE INDEX runs_idle ON @schema@.runs (updated_at) WHERE status = 'running' AND wake_at IS NULL;
CREATE INDEX runs_list ON @schema@.runs (created_at DESC, id DESC);
CREATE INDEX runs_workflow ON @schema@.runs (workflow, status, created_at DESC);
CREATE INDEX runs_status ON @schema@.runs (status, created_at DESC);
CREATE INDEX runs_owner ON @schema@.runs (owner, created_at DESC) WHERE owner IS NOT NULL;
CREATE INDEX runs_parent ON @schema@.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
-- live runs with a deadline, soonest first: what the deadline loop reads
CREATE INDEX runs_deadline ON @schema@.runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended');
CREATE INDEX runs_queued ON @schema@.runs (wake_at) WHERE status = 'queued';
-- ended top-level runs oldest first: what a prune walks through, batch by batch
CREATE INDEX runs_ended ON @schema@.runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL;
-- approval gates across runs (list_approvals) by creation time, without a scan of steps
CREATE INDEX steps_gates ON @schema@.steps (created_at) WHERE kind = 'approval';
CREATE INDEX jobs_due ON @schema@.jobs (available_at) WHERE lease_owner IS NULL;
CREATE INDEX jobs_held ON @schema@.jobs (lease_owner, lease_until) WHERE lease_owner IS NOT NULL;
CREATE INDEX timers_due ON @schema@.timers (wake_at);
CREATE INDEX events_open ON @schema@.events (run_id, id) WHERE consumed_by IS NULL;
-- a run's decisions are read, and a pruned run's events deleted, by run
CREATE INDEX events_run ON @schema@.events (run_id);
-- the requests a pass may take, oldest first; a pruned run's requests go by run
CREATE INDEX requests_sent ON @schema@.requests (run_id, id) WHERE status = 'sent';
CREATE INDEX requests_run ON @schema@.requests (run_id);
CREATE INDEX run_tags_pair ON @schema@.run_tags (key, value, run_id);
-- a run takes an event of a de-duplication key once, held or consumed: a second send of
-- the key stores nothing (the insert's conflict), whichever process sends it
CREATE UNIQUE INDEX events_dedup ON @schema@.events (run_id, dedup) WHERE dedup IS NOT NULL;
CREATE INDEX queue_admissions_at ON @schema@.queue_admissions (queue, at);
CREATE INDEX spend_at ON @schema@.spend (queue, at);
CREATE INDEX schedules_due ON @schema@.schedules (next_tick) WHERE status = 'active';
-- the entries of one step attempt (a reset finds the streams it wrote to)
CREATE INDEX stream_entries_attempt ON @schema@.stream_entries (run_id, step_key, attempt)
    WHERE step_key IS NOT NULL;
-- the first entry of each stream: the run's page counts its streams in its marks
CREATE INDEX stream_entries_first ON @schema@.stream_entries (run_id) WHERE "offset" = 0;
-- made again by migration 008 (paused runs hold their slot and key), so created last
CREATE INDEX runs_queue_active ON @schema@.runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended', 'paused');
-- one run per workflow, debounce key and owner waits to start; a run whose start time has
-- passed leaves the window (its key is cleared) before the next start of the key inserts
CREATE UNIQUE INDEX runs_debounce ON @schema@.runs (workflow, debounce_key, coalesce(owner, ''))
    WHERE debounce_key IS NOT NULL AND status = 'queued';
-- a de-duplication key belongs to one live run at a time; it is free again once that run
-- has ended (the row leaves this partial index); a run needs_attention keeps it (made
-- again by migration 014)
CREATE UNIQUE INDEX runs_dedup ON @schema@.runs (dedup)
    WHERE dedup IS NOT NULL
        AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention');
