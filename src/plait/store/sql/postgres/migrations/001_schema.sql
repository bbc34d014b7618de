-- plait schema for PostgreSQL, version 1.
-- description: runs, steps, attempts, jobs, timers, events, state
--
-- @schema@ is replaced by the quoted schema name and @channel@ by the NOTIFY channel (a
-- string literal) before this script runs, inside one transaction under an advisory lock.
--
-- Times are timestamptz (the store converts them to and from unix seconds at the edge);
-- durations (retry_delay, timeout) are seconds in double precision; JSON is jsonb.
--
-- Every state change that spans several rows lives in a function here, so that each store
-- method is one statement: one round trip, one implicit transaction, no transaction left
-- open on the client side if the connection drops.

CREATE TABLE @schema@.runs (
    id              text PRIMARY KEY,
    workflow        text NOT NULL,
    kind            text NOT NULL DEFAULT 'workflow',   -- 'workflow' (code) or 'graph'
    version         text,
    status          text NOT NULL,
    input           jsonb,
    output          jsonb,
    error           jsonb,
    parent_run_id   text,
    parent_step_key text,
    owner           text,
    start_node      text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    -- the orchestrator queue lives on the run row: a pass is due when wake_at <= now
    wake_at         timestamptz,
    wakeups         bigint NOT NULL DEFAULT 0,
    lease_owner     text,
    lease_until     timestamptz,
    -- how often the idle sweep found the run with nothing to wake it (its back-off)
    idle_sweeps     integer NOT NULL DEFAULT 0
) WITH (fillfactor = 80);
CREATE INDEX runs_due ON @schema@.runs (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX runs_idle ON @schema@.runs (updated_at)
    WHERE status = 'running' AND wake_at IS NULL AND lease_owner IS NULL;
CREATE INDEX runs_lease ON @schema@.runs (lease_owner) WHERE lease_owner IS NOT NULL;
CREATE INDEX runs_list ON @schema@.runs (created_at DESC, id DESC);
CREATE INDEX runs_workflow ON @schema@.runs (workflow, status, created_at DESC);
CREATE INDEX runs_status ON @schema@.runs (status, created_at DESC);
CREATE INDEX runs_owner ON @schema@.runs (owner, created_at DESC) WHERE owner IS NOT NULL;
CREATE INDEX runs_parent ON @schema@.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- Column order is plait.store.base.StepRow's field order: the store passes step rows as this
-- table's row type.
CREATE TABLE @schema@.steps (
    run_id        text NOT NULL,
    key           text NOT NULL,
    seq           integer NOT NULL,
    name          text NOT NULL,
    kind          text NOT NULL,        -- do, child, sleep, suspend, event, value, on_error, node
    function      text,
    status        text NOT NULL,
    input         jsonb,
    output        jsonb,
    error         jsonb,
    attempts      integer NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    retries       integer NOT NULL DEFAULT 0,
    retry_delay   double precision,     -- NULL: exponential
    timeout       double precision,
    invocation_id text NOT NULL,
    child_run_id  text,
    branch        text,
    from_key      text,
    queued        boolean NOT NULL DEFAULT false,
    wake_at       timestamptz,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
) WITH (fillfactor = 80);
CREATE INDEX steps_running ON @schema@.steps (run_id) WHERE status = 'running';

CREATE TABLE @schema@.attempts (
    run_id      text NOT NULL,
    key         text NOT NULL,
    attempt     integer NOT NULL,
    status      text NOT NULL,          -- running, succeeded, failed, interrupted, cancelled
    output      jsonb,
    error       jsonb,
    worker      text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (run_id, key, attempt)
);

-- queued steps waiting for (or held by) a step worker; a row is deleted when its step ends
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
CREATE INDEX jobs_due ON @schema@.jobs (available_at) WHERE lease_owner IS NULL;
CREATE INDEX jobs_held ON @schema@.jobs (lease_owner, lease_until) WHERE lease_owner IS NOT NULL;

-- durable timers: sleeps, retry back-offs, event timeouts
CREATE TABLE @schema@.timers (
    run_id   text NOT NULL,
    step_key text NOT NULL,
    purpose  text NOT NULL,
    wake_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX timers_due ON @schema@.timers (wake_at);

CREATE TABLE @schema@.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    name        text NOT NULL,
    payload     jsonb,
    created_at  timestamptz NOT NULL,
    consumed_by text
);
CREATE INDEX events_open ON @schema@.events (run_id, id) WHERE consumed_by IS NULL;

CREATE TABLE @schema@.state (
    run_id text NOT NULL,
    name   text NOT NULL,
    value  jsonb,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE @schema@.workflow_versions (
    workflow   text NOT NULL,
    version    text NOT NULL,
    kind       text NOT NULL,           -- 'workflow' or 'graph'
    definition jsonb,                   -- graphs: the definition; code workflows: NULL
    status     text NOT NULL DEFAULT 'active',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (workflow, version)
);

-- -- what the store sends ----------------------------------------------------------------

-- A new run (plait.store.base.NewRun).
CREATE TYPE @schema@.new_run AS (
    id              text,
    workflow        text,
    kind            text,
    version         text,
    input           jsonb,
    owner           text,
    parent_run_id   text,
    parent_step_key text,
    start_node      text,
    lease_owner     text,
    lease_seconds   double precision
);

-- One write of a pass (plait.store.base.Op); which fields are set depends on kind.
CREATE TYPE @schema@.op AS (
    kind     text,      -- put_step, start_attempt, finish_attempt, set_timer, clear_timer,
                        -- enqueue_job, consume_event, create_child_run, set_state, end_run
    step     @schema@.steps,
    attempt  integer,
    worker   text,
    status   text,
    output   jsonb,
    error    jsonb,
    key      text,
    purpose  text,
    at       timestamptz,
    function text,
    event_id bigint,
    run      @schema@.new_run,
    name     text
);

-- -- building blocks ------------------------------------------------------------------------

-- Wake a running run: count the wake-up (a pass that started before it will go again) and
-- make it due at p_at unless it is due sooner. Listeners hear about it at commit.
CREATE FUNCTION @schema@.wake_run(p_run text, p_now timestamptz, p_at timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.runs SET wakeups = wakeups + 1, updated_at = p_now, idle_sweeps = 0,
        wake_at = CASE WHEN wake_at IS NULL OR wake_at > p_at THEN p_at ELSE wake_at END
    WHERE id = p_run AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN true;
END $$;

-- Insert a step, or update every mutable column of an existing one.
CREATE FUNCTION @schema@.put_step(s @schema@.steps)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO @schema@.steps SELECT (s).*
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at;
END $$;

CREATE FUNCTION @schema@.open_attempt(
    p_run text, p_key text, p_attempt integer, p_worker text, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO @schema@.attempts (run_id, key, attempt, status, worker, started_at)
    VALUES (p_run, p_key, p_attempt, 'running', p_worker, p_now)
    ON CONFLICT (run_id, key, attempt) DO UPDATE SET
        status = 'running', worker = excluded.worker, started_at = excluded.started_at,
        finished_at = NULL, output = NULL, error = NULL;
END $$;

CREATE FUNCTION @schema@.close_attempt(
    p_run text, p_key text, p_attempt integer, p_status text, p_output jsonb,
    p_error jsonb, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.attempts SET status = p_status, output = p_output, error = p_error,
        finished_at = p_now
    WHERE run_id = p_run AND key = p_key AND attempt = p_attempt;
END $$;

-- Insert a run (already leased when the caller drives it inline); false if the id exists.
CREATE FUNCTION @schema@.insert_run(n @schema@.new_run, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    leased boolean := coalesce(n.lease_owner, '') <> '';
BEGIN
    INSERT INTO @schema@.runs (id, workflow, kind, version, status, input, parent_run_id,
        parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
        lease_owner, lease_until)
    VALUES (n.id, n.workflow, n.kind, n.version, 'running', n.input, n.parent_run_id,
        n.parent_step_key, n.owner, n.start_node, p_now, p_now, p_now, 1, n.lease_owner,
        CASE WHEN leased THEN p_now + make_interval(secs => n.lease_seconds) END)
    ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT leased THEN
        PERFORM pg_notify(@channel@, 'work');
    END IF;
    RETURN true;
END $$;

-- create_run: the run with this id, and whether this call created it.
CREATE FUNCTION @schema@.create_run(
    n @schema@.new_run, p_now timestamptz, OUT created boolean, OUT run @schema@.runs
) LANGUAGE plpgsql AS $$
BEGIN
    created := @schema@.insert_run(n, p_now);
    SELECT * INTO run FROM @schema@.runs WHERE id = n.id;
END $$;

-- A child run ended: settle the parent's step that waits for it and wake the parent.
CREATE FUNCTION @schema@.settle_parent_step(
    p_parent text, p_key text, p_child text, p_status text, p_output jsonb, p_error jsonb,
    p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s @schema@.steps;
    outcome text;
    child_error jsonb;
    message text;
    code jsonb;
BEGIN
    SELECT * INTO s FROM @schema@.steps WHERE run_id = p_parent AND key = p_key;
    IF NOT FOUND OR s.child_run_id IS DISTINCT FROM p_child OR s.status <> 'running' THEN
        RETURN;
    END IF;
    IF p_status = 'completed' THEN
        s.status := 'succeeded';
        s.output := p_output;
        s.error := NULL;
        outcome := 'succeeded';
    ELSE
        child_error := CASE WHEN jsonb_typeof(p_error) = 'object' THEN p_error
                            ELSE '{}'::jsonb END;
        message := CASE WHEN NOT child_error ? 'message' THEN p_status
                        ELSE coalesce(child_error ->> 'message', 'None') END;
        code := child_error -> 'code';
        IF code IS NULL OR code IN ('null', '""', 'false', '0') THEN
            code := '"CHILD_FAILED"';
        END IF;
        s.status := 'failed';
        s.output := NULL;
        s.failures := s.failures + 1;
        s.error := jsonb_build_object(
            'message', format('child run %s %s: %s', p_child, p_status, message),
            'type', 'ChildRunError', 'code', code, 'child_run_id', p_child);
        outcome := 'failed';
    END IF;
    s.updated_at := p_now;
    PERFORM @schema@.put_step(s);
    PERFORM @schema@.close_attempt(p_parent, p_key, s.attempts, outcome, s.output, s.error,
                                   p_now);
    PERFORM @schema@.wake_run(p_parent, p_now, p_now);
END $$;

-- Move a run to p_status if it is in p_from (the terminal guard); returns every run that
-- moved (a cancel cascades to the children, parents before children, which is also the
-- order in which rows are locked). A terminal end settles the parent's step.
CREATE FUNCTION @schema@.end_run(
    p_run text, p_status text, p_output jsonb, p_error jsonb, p_now timestamptz,
    p_from text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
    parent_key text;
    children text[];
    child text;
    moved text[];
BEGIN
    UPDATE @schema@.runs SET status = p_status, output = p_output, error = p_error,
        updated_at = p_now, wake_at = NULL
    WHERE id = p_run AND status = ANY (p_from)
    RETURNING parent_run_id, parent_step_key INTO parent, parent_key;
    IF NOT FOUND THEN
        RETURN ARRAY[]::text[];
    END IF;
    moved := ARRAY[p_run];
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    IF p_status = 'suspended' THEN
        RETURN moved;
    END IF;
    DELETE FROM @schema@.timers WHERE run_id = p_run;
    DELETE FROM @schema@.jobs WHERE run_id = p_run;
    IF p_status = 'cancelled' THEN
        SELECT array_agg(id ORDER BY id) INTO children FROM @schema@.runs
        WHERE parent_run_id = p_run AND status IN ('running', 'suspended');
        FOREACH child IN ARRAY coalesce(children, ARRAY[]::text[]) LOOP
            moved := moved || @schema@.end_run(child, p_status, NULL, p_error, p_now,
                                               ARRAY['running', 'suspended']);
        END LOOP;
    END IF;
    IF coalesce(parent, '') <> '' AND coalesce(parent_key, '') <> '' THEN
        PERFORM @schema@.settle_parent_step(parent, parent_key, p_run, p_status, p_output,
                                            p_error, p_now);
    END IF;
    RETURN moved;
END $$;

-- Apply the writes of a pass in order. SQLSTATE PLT01: an event was consumed by another
-- pass (the whole statement rolls back, like a lost lease).
CREATE FUNCTION @schema@.apply_ops(p_run text, p_ops @schema@.op[], p_now timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
BEGIN
    FOREACH o IN ARRAY p_ops LOOP
        CASE o.kind
        WHEN 'put_step' THEN
            PERFORM @schema@.put_step(o.step);
        WHEN 'start_attempt' THEN
            PERFORM @schema@.put_step(o.step);
            PERFORM @schema@.open_attempt((o.step).run_id, (o.step).key, o.attempt, o.worker,
                                          p_now);
        WHEN 'finish_attempt' THEN
            PERFORM @schema@.put_step(o.step);
            PERFORM @schema@.close_attempt((o.step).run_id, (o.step).key, o.attempt, o.status,
                                           o.output, o.error, p_now);
        WHEN 'set_timer' THEN
            INSERT INTO @schema@.timers (run_id, step_key, purpose, wake_at)
            VALUES (p_run, o.key, o.purpose, o.at)
            ON CONFLICT (run_id, step_key) DO UPDATE SET purpose = excluded.purpose,
                wake_at = excluded.wake_at;
        WHEN 'clear_timer' THEN
            DELETE FROM @schema@.timers WHERE run_id = p_run AND step_key = o.key;
        WHEN 'enqueue_job' THEN
            INSERT INTO @schema@.jobs (run_id, step_key, function, available_at, created_at)
            VALUES (p_run, o.key, o.function, o.at, p_now)
            ON CONFLICT (run_id, step_key) DO UPDATE SET function = excluded.function,
                available_at = excluded.available_at, lease_owner = NULL, lease_until = NULL;
            PERFORM pg_notify(@channel@, 'work');
        WHEN 'consume_event' THEN
            UPDATE @schema@.events SET consumed_by = o.key
            WHERE id = o.event_id AND consumed_by IS NULL;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'event % was consumed by another pass', o.event_id
                    USING ERRCODE = 'PLT01';
            END IF;
        WHEN 'create_child_run' THEN
            PERFORM @schema@.insert_run(o.run, p_now);
        WHEN 'set_state' THEN
            INSERT INTO @schema@.state (run_id, name, value) VALUES (p_run, o.name, o.output)
            ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value;
        WHEN 'end_run' THEN
            PERFORM @schema@.end_run(p_run, o.status, o.output, o.error, p_now,
                                     ARRAY['running']);
        ELSE
            RAISE EXCEPTION 'unknown store operation %', o.kind;
        END CASE;
    END LOOP;
END $$;

-- -- what the store calls -----------------------------------------------------------------

-- One batch of a pass in one transaction, fenced by the run lease: the run row is locked
-- and must still be leased to p_fence (SQLSTATE PLT01 otherwise). A batch that ends a child
-- run locks the parent row first, the same order as the cancel cascade.
CREATE FUNCTION @schema@.commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    parent text;
    holder text;
BEGIN
    IF p_fence IS NOT NULL THEN
        FOREACH o IN ARRAY p_ops LOOP
            IF o.kind = 'end_run' THEN
                SELECT parent_run_id INTO parent FROM @schema@.runs WHERE id = p_run;
                IF parent IS NOT NULL THEN
                    PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE;
                END IF;
                EXIT;
            END IF;
        END LOOP;
        SELECT lease_owner INTO holder FROM @schema@.runs WHERE id = p_run FOR UPDATE;
        IF NOT FOUND OR holder IS DISTINCT FROM p_fence THEN
            RAISE EXCEPTION 'lost the lease on run %', p_run USING ERRCODE = 'PLT01';
        END IF;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
END $$;

-- The last writes of a pass and the release of its lease in one transaction: one commit
-- instead of two. Returns whether the run is due again at once.
CREATE FUNCTION @schema@.commit_and_release(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz, p_seen bigint
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    due timestamptz;
BEGIN
    PERFORM @schema@.commit_batch(p_run, p_fence, p_ops, p_now);
    UPDATE @schema@.runs SET lease_owner = NULL, lease_until = NULL, wake_at = CASE
        WHEN status <> 'running' THEN NULL
        WHEN wakeups <> p_seen THEN p_now
        ELSE (SELECT min(t.wake_at) FROM @schema@.timers t WHERE t.run_id = runs.id) END
    WHERE id = p_run AND lease_owner = p_fence
    RETURNING wake_at INTO due;
    RETURN due IS NOT NULL AND due <= p_now;
END $$;

-- Take a queued step for one attempt: NULL if the job is no longer ours, the run is
-- suspended (the job waits, unclaimed, for a resume), or the run has ended or the step is
-- settled (the job is dropped then). SQLSTATE PLT04 when the job
-- names another function than the step (nothing is written).
CREATE FUNCTION @schema@.begin_queued_step(
    p_run text, p_key text, p_function text, p_owner text, p_now timestamptz
) RETURNS @schema@.steps LANGUAGE plpgsql AS $$
DECLARE
    s @schema@.steps;
    run_status text;
BEGIN
    -- the run row first (the order every writer of this run follows), shared: steps of
    -- one run may begin side by side
    SELECT status INTO run_status FROM @schema@.runs WHERE id = p_run FOR SHARE;
    PERFORM 1 FROM @schema@.jobs
    WHERE run_id = p_run AND step_key = p_key AND lease_owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF run_status = 'suspended' THEN
        -- keep the job for when the run is resumed; claims skip suspended runs
        UPDATE @schema@.jobs SET lease_owner = NULL, lease_until = NULL
        WHERE run_id = p_run AND step_key = p_key;
        RETURN NULL;
    END IF;
    SELECT * INTO s FROM @schema@.steps WHERE run_id = p_run AND key = p_key;
    IF NOT FOUND OR run_status IS DISTINCT FROM 'running' THEN
        DELETE FROM @schema@.jobs WHERE run_id = p_run AND step_key = p_key;
        RETURN NULL;
    END IF;
    IF s.function IS DISTINCT FROM p_function THEN
        RAISE EXCEPTION 'job for step % of run % names function %, but the step was created with %',
            quote_literal(p_key), p_run, quote_literal(p_function),
            quote_nullable(s.function)
            USING ERRCODE = 'PLT04';
    END IF;
    IF s.status = 'running' THEN
        -- The previous holder's lease ran out while it ran this step: that attempt was
        -- interrupted and this delivery takes over with the next attempt.
        PERFORM @schema@.close_attempt(p_run, p_key, s.attempts, 'interrupted', NULL, NULL,
                                       p_now);
        IF s.attempts - s.failures >= 10 THEN
            -- a body that kills its worker every time is given up, not retried forever
            s.status := 'failed';
            s.error := jsonb_build_object(
                'message', format('step %L was interrupted %s times (its worker died while '
                                  'running it each time)', p_key, s.attempts - s.failures),
                'type', 'StepInterrupted', 'code', 'STEP_INTERRUPTED');
            s.updated_at := p_now;
            PERFORM @schema@.put_step(s);
            DELETE FROM @schema@.jobs WHERE run_id = p_run AND step_key = p_key;
            PERFORM @schema@.wake_run(p_run, p_now, p_now);
            RETURN NULL;
        END IF;
    ELSIF s.status <> 'scheduled' THEN
        DELETE FROM @schema@.jobs WHERE run_id = p_run AND step_key = p_key;
        RETURN NULL;
    END IF;
    s.attempts := s.attempts + 1;
    s.status := 'running';
    s.wake_at := NULL;
    s.updated_at := p_now;
    PERFORM @schema@.put_step(s);
    PERFORM @schema@.open_attempt(p_run, p_key, s.attempts, p_owner, p_now);
    RETURN s;
END $$;

-- Record the outcome of a queued step and wake its run, if the job is still ours.
CREATE FUNCTION @schema@.finish_queued_step(
    p_run text, p_key text, p_owner text, p_ops @schema@.op[], p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM @schema@.runs WHERE id = p_run FOR UPDATE;
    DELETE FROM @schema@.jobs
    WHERE run_id = p_run AND step_key = p_key AND lease_owner = p_owner;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
    RETURN true;
END $$;

-- A run that goes on again (resume, retry) gets back the jobs its queued steps lost while
-- it stood still (a failed run's jobs are deleted; a worker's result for a gone job is
-- dropped). A step that was running is interrupted and scheduled again.
CREATE FUNCTION @schema@.requeue(p_run text, p_now timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s @schema@.steps;
BEGIN
    FOR s IN SELECT * FROM @schema@.steps st
             WHERE st.run_id = p_run AND st.queued AND st.status IN ('scheduled', 'running')
                 AND NOT EXISTS (SELECT 1 FROM @schema@.jobs j
                                 WHERE j.run_id = st.run_id AND j.step_key = st.key) LOOP
        IF s.status = 'running' THEN
            PERFORM @schema@.close_attempt(p_run, s.key, s.attempts, 'interrupted', NULL, NULL,
                                           p_now);
            s.status := 'scheduled';
            s.updated_at := p_now;
            PERFORM @schema@.put_step(s);
        END IF;
        INSERT INTO @schema@.jobs (run_id, step_key, function, available_at, created_at)
        VALUES (p_run, s.key, s.function, greatest(p_now, coalesce(s.wake_at, p_now)), p_now)
        ON CONFLICT (run_id, step_key) DO NOTHING;
    END LOOP;
END $$;

-- The status of a run, locked for an action from outside a pass. SQLSTATE PLT02: no such
-- run; PLT03: the run is in a status that does not allow the action (DETAIL: the status).
CREATE FUNCTION @schema@.lock_for_action(p_run text, p_allowed text[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    current text;
BEGIN
    SELECT status INTO current FROM @schema@.runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'PLT02';
    END IF;
    IF NOT current = ANY (p_allowed) THEN
        RAISE EXCEPTION 'run % is %', p_run, current USING ERRCODE = 'PLT03', DETAIL = current;
    END IF;
    RETURN current;
END $$;

CREATE FUNCTION @schema@.cancel_run(p_run text, p_error jsonb, p_now timestamptz)
RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended']);
    RETURN @schema@.end_run(p_run, 'cancelled', NULL, p_error, p_now,
                            ARRAY['running', 'suspended']);
END $$;

-- A suspended run goes on: its open suspend steps succeed (with resumed_at) and it is due.
CREATE FUNCTION @schema@.resume_run(p_run text, p_now timestamptz)
RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
DECLARE
    s @schema@.steps;
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['suspended']);
    FOR s IN SELECT * FROM @schema@.steps
             WHERE run_id = p_run AND kind = 'suspend' AND status = 'pending' LOOP
        s.status := 'succeeded';
        s.output := CASE WHEN jsonb_typeof(s.input) = 'object' THEN s.input
                         ELSE '{}'::jsonb END
                    || jsonb_build_object('resumed_at', extract(epoch FROM p_now)::float8);
        s.updated_at := p_now;
        PERFORM @schema@.put_step(s);
        PERFORM @schema@.close_attempt(p_run, s.key, s.attempts, 'succeeded', s.output, NULL,
                                       p_now);
    END LOOP;
    PERFORM @schema@.requeue(p_run, p_now);
    UPDATE @schema@.runs SET status = 'running', error = NULL, updated_at = p_now,
        wake_at = p_now, wakeups = wakeups + 1
    WHERE id = p_run;
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;

-- A failed run goes on from its failed steps; succeeded steps are kept.
CREATE FUNCTION @schema@.retry_run(p_run text, p_now timestamptz)
RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['failed']);
    UPDATE @schema@.steps SET status = 'pending', failures = 0, wake_at = NULL,
        updated_at = p_now
    WHERE run_id = p_run AND status = 'failed';
    PERFORM @schema@.requeue(p_run, p_now);
    UPDATE @schema@.runs SET status = 'running', error = NULL, output = NULL,
        updated_at = p_now, wake_at = p_now, wakeups = wakeups + 1
    WHERE id = p_run;
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;

CREATE FUNCTION @schema@.send_event(
    p_run text, p_name text, p_payload jsonb, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended']);
    INSERT INTO @schema@.events (run_id, name, payload, created_at)
    VALUES (p_run, p_name, p_payload, p_now);
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
END $$;
