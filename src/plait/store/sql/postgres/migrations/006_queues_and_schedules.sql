-- plait schema for PostgreSQL, version 6: queues with limits, delayed starts, schedules.
-- description: queued runs, queue admissions, de-duplication keys and schedules
--
-- A run started through a queue, or to start later, is inserted 'queued' with wake_at set
-- to the time it may start. admit_runs moves queued runs to 'running' and leases them to
-- the admitting worker in one statement, taking only what the limits it is given allow
-- (the limits are the worker's app.queue declarations: the database stores rows, not
-- policy). A queue's admissions are serialised by a transaction-scoped advisory lock per
-- queue name, taken before the counts are read, so two workers never both see the last
-- free slot. Nothing is held across user code.

ALTER TABLE @schema@.runs ADD COLUMN queue text;
ALTER TABLE @schema@.runs ADD COLUMN queue_key text;
ALTER TABLE @schema@.runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE @schema@.runs ADD COLUMN dedup text;
-- the tick a schedule started the run for (wf.scheduled_at)
ALTER TABLE @schema@.runs ADD COLUMN scheduled_at timestamptz;
-- when a queued run was admitted
ALTER TABLE @schema@.runs ADD COLUMN admitted_at timestamptz;

CREATE INDEX runs_queued ON @schema@.runs (wake_at) WHERE status = 'queued';
CREATE INDEX runs_queue_active ON @schema@.runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('running', 'suspended');
-- a de-duplication key belongs to one live run at a time; it is free again once that run
-- has ended (the row leaves this partial index)
CREATE UNIQUE INDEX runs_dedup ON @schema@.runs (dedup)
    WHERE dedup IS NOT NULL AND status IN ('queued', 'running', 'suspended');

-- admissions of queues with a rate, for the sliding window; rows older than the window
-- are deleted by the admissions that follow them
CREATE TABLE @schema@.queue_admissions (
    queue text NOT NULL,
    at    timestamptz NOT NULL
);
CREATE INDEX queue_admissions_at ON @schema@.queue_admissions (queue, at);

CREATE TABLE @schema@.schedules (
    name        text PRIMARY KEY,
    workflow    text NOT NULL,
    definition  jsonb NOT NULL,         -- plait.schedules.ScheduleSpec.definition()
    status      text NOT NULL DEFAULT 'active',   -- active | paused
    source      text NOT NULL,          -- app (declared in code) | api (made at run time)
    owner       text,
    next_tick   timestamptz,
    last_tick   timestamptz,
    last_run_id text,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX schedules_due ON @schema@.schedules (next_tick) WHERE status = 'active';

-- A new run carries its queue options and its start time.
ALTER TYPE @schema@.new_run ADD ATTRIBUTE status text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE queue text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE queue_key text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE priority integer;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE dedup text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE not_before timestamptz;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE scheduled_at timestamptz;

-- Insert a run unless its id (or its de-duplication key, among live runs) is taken.
CREATE OR REPLACE FUNCTION @schema@.insert_run(n @schema@.new_run, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    leased boolean := coalesce(n.lease_owner, '') <> '';
    v_status text := coalesce(n.status, 'running');
BEGIN
    INSERT INTO @schema@.runs (id, workflow, kind, version, status, input, parent_run_id,
        parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
        lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at)
    VALUES (n.id, n.workflow, n.kind, n.version, v_status, n.input, n.parent_run_id,
        n.parent_step_key, n.owner, n.start_node, p_now, p_now,
        greatest(p_now, coalesce(n.not_before, p_now)), 1, n.lease_owner,
        CASE WHEN leased THEN p_now + make_interval(secs => n.lease_seconds) END,
        n.queue, n.queue_key, coalesce(n.priority, 0), n.dedup, n.scheduled_at)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT leased THEN
        PERFORM pg_notify(@channel@, 'work');
    END IF;
    RETURN true;
END $$;

-- create_run: the run with this id (or the live run holding its de-duplication key), and
-- whether this call created it. A live run that ends between the insert and the look-up
-- frees its key: the insert is tried again.
CREATE OR REPLACE FUNCTION @schema@.create_run(
    n @schema@.new_run, p_now timestamptz, OUT created boolean, OUT run @schema@.runs
) LANGUAGE plpgsql AS $$
BEGIN
    FOR attempt IN 1..5 LOOP
        created := @schema@.insert_run(n, p_now);
        SELECT * INTO run FROM @schema@.runs WHERE id = n.id;
        IF FOUND OR n.dedup IS NULL THEN
            RETURN;
        END IF;
        SELECT * INTO run FROM @schema@.runs
        WHERE dedup = n.dedup AND status IN ('queued', 'running', 'suspended');
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'de-duplication key % keeps changing hands', n.dedup;
END $$;

-- A queued run can be cancelled and can receive events (kept for its wait).
CREATE OR REPLACE FUNCTION @schema@.cancel_run(
    p_run text, p_error jsonb, p_parent @schema@.step_end, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended', 'queued']);
    RETURN @schema@.end_run(p_run, 'cancelled', NULL, p_error, p_parent, p_now,
                            ARRAY['running', 'suspended', 'queued']);
END $$;

CREATE OR REPLACE FUNCTION @schema@.send_event(
    p_run text, p_name text, p_payload jsonb, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended', 'queued']);
    INSERT INTO @schema@.events (run_id, name, payload, created_at)
    VALUES (p_run, p_name, p_payload, p_now);
    PERFORM @schema@.wake_run(p_run, p_now, p_now);
END $$;

-- A suspended or failed run goes on (resume, retry), as in version 2; a retried run of a
-- queue is admitted again (it gave its slot back when it failed), and a de-duplication key
-- another live run took meanwhile stays with that run.
CREATE OR REPLACE FUNCTION @schema@.reopen_run(
    p_run text, p_from text, p_seen bigint, p_ops @schema@.op[], p_now timestamptz
) RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY[p_from]);
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND wakeups = p_seen;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    UPDATE @schema@.runs r SET
        status = CASE WHEN r.status = 'failed' AND r.queue IS NOT NULL THEN 'queued'
                      ELSE 'running' END,
        error = NULL, output = NULL, updated_at = p_now, wake_at = p_now,
        wakeups = r.wakeups + 1,
        dedup = CASE WHEN EXISTS (SELECT 1 FROM @schema@.runs o
                                  WHERE o.dedup = r.dedup AND o.id <> r.id
                                      AND o.status IN ('queued', 'running', 'suspended'))
                     THEN NULL ELSE r.dedup END
    WHERE r.id = p_run;
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;

-- Take the advisory locks of the given queues, in name order (every caller uses the same
-- order, so two admissions never wait for each other in a circle).
CREATE FUNCTION @schema@.lock_queues(p_names text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT x FROM unnest(p_names) AS x ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(@channel@ || ':queue:' || q, 0));
    END LOOP;
END $$;

-- Admit up to p_limit due queued runs, highest priority first (then oldest start time),
-- and lease them to p_owner. The limits of the queues the caller knows come as parallel
-- arrays (NULL: no such limit); a queue not among them has none. per_key applies to runs
-- that have a key. A run holds its queue slot from admission until it ends.
CREATE FUNCTION @schema@.admit_runs(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_names text[], p_concurrency integer[], p_per_key integer[], p_rate integer[],
    p_window float8[]
) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_queues(p_names);
    -- a new statement, so a new snapshot: it sees every admission committed before the
    -- locks were granted
    RETURN QUERY
    WITH conf AS (
        SELECT * FROM unnest(p_names, p_concurrency, p_per_key, p_rate, p_window)
            AS c(name, concurrency, per_key, rate, rate_window)
    ), active AS (
        SELECT a.queue, count(*) AS n FROM @schema@.runs a
        WHERE a.queue = ANY (p_names) AND a.status IN ('running', 'suspended')
        GROUP BY a.queue
    ), active_keys AS (
        SELECT a.queue, a.queue_key, count(*) AS n FROM @schema@.runs a
        JOIN conf c ON c.name = a.queue AND c.per_key IS NOT NULL
        WHERE a.status IN ('running', 'suspended') AND a.queue_key IS NOT NULL
        GROUP BY a.queue, a.queue_key
    ), recent AS (
        SELECT q.queue, count(*) AS n FROM @schema@.queue_admissions q
        JOIN conf c ON c.name = q.queue AND c.rate IS NOT NULL
        WHERE q.at > p_now - make_interval(secs => c.rate_window)
        GROUP BY q.queue
    ), due AS (
        SELECT r.id, r.queue, r.queue_key, r.priority, r.wake_at, r.created_at,
            c.concurrency, c.per_key, c.rate,
            row_number() OVER (PARTITION BY r.queue, r.queue_key
                ORDER BY r.priority DESC, r.wake_at, r.created_at, r.id) AS nth_key
        FROM @schema@.runs r LEFT JOIN conf c ON c.name = r.queue
        WHERE r.status = 'queued' AND r.wake_at <= p_now
    ), key_fits AS (
        SELECT d.*, row_number() OVER (PARTITION BY d.queue
                ORDER BY d.priority DESC, d.wake_at, d.created_at, d.id) AS nth
        FROM due d LEFT JOIN active_keys k ON k.queue = d.queue AND k.queue_key = d.queue_key
        WHERE d.per_key IS NULL OR d.queue_key IS NULL
            OR d.nth_key <= d.per_key - coalesce(k.n, 0)
    ), fits AS (
        SELECT f.id, f.rate FROM key_fits f
        LEFT JOIN active a ON a.queue = f.queue
        LEFT JOIN recent rc ON rc.queue = f.queue
        WHERE (f.concurrency IS NULL OR f.nth <= f.concurrency - coalesce(a.n, 0))
            AND (f.rate IS NULL OR f.nth <= f.rate - coalesce(rc.n, 0))
        ORDER BY f.priority DESC, f.wake_at, f.created_at, f.id
        LIMIT p_limit
    ), admitted AS (
        UPDATE @schema@.runs r SET status = 'running', lease_owner = p_owner,
            lease_until = p_until, wake_at = p_now, admitted_at = p_now, updated_at = p_now
        FROM fits f WHERE r.id = f.id AND r.status = 'queued'
        RETURNING r.id, r.queue, f.rate
    ), logged AS (
        INSERT INTO @schema@.queue_admissions (queue, at)
        SELECT a.queue, p_now FROM admitted a WHERE a.rate IS NOT NULL
    ), pruned AS (
        DELETE FROM @schema@.queue_admissions q USING conf c
        WHERE c.name = q.queue AND c.rate IS NOT NULL
            AND q.at <= p_now - make_interval(secs => c.rate_window)
    )
    SELECT a.id FROM admitted a;
END $$;

-- Lease up to p_limit due jobs of functions admitted through limited queues (function
-- p_functions[i] belongs to queue p_function_queues[i]). A job holds its queue slot while
-- its lease runs: a worker that dies gives the slot back when the lease expires.
CREATE FUNCTION @schema@.claim_queue_jobs(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_names text[], p_concurrency integer[], p_rate integer[], p_window float8[],
    p_functions text[], p_function_queues text[]
) RETURNS TABLE (run_id text, step_key text, function text, deliveries integer,
                 available_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM @schema@.lock_queues(p_names);
    RETURN QUERY
    WITH conf AS (
        SELECT * FROM unnest(p_names, p_concurrency, p_rate, p_window)
            AS c(name, concurrency, rate, rate_window)
    ), fmap AS (
        SELECT * FROM unnest(p_functions, p_function_queues) AS m(fn, queue)
    ), held AS (
        SELECT m.queue, count(*) AS n FROM @schema@.jobs j JOIN fmap m ON m.fn = j.function
        WHERE j.lease_owner IS NOT NULL AND j.lease_until >= p_now
        GROUP BY m.queue
    ), recent AS (
        SELECT q.queue, count(*) AS n FROM @schema@.queue_admissions q
        JOIN conf c ON c.name = q.queue AND c.rate IS NOT NULL
        WHERE q.at > p_now - make_interval(secs => c.rate_window)
        GROUP BY q.queue
    ), due AS (
        SELECT j.run_id, j.step_key, j.available_at, m.queue, c.concurrency, c.rate,
            row_number() OVER (PARTITION BY m.queue
                ORDER BY j.available_at, j.run_id, j.step_key) AS nth
        FROM @schema@.jobs j JOIN fmap m ON m.fn = j.function
        JOIN conf c ON c.name = m.queue
        WHERE j.available_at <= p_now AND (j.lease_owner IS NULL OR j.lease_until < p_now)
            AND EXISTS (SELECT 1 FROM @schema@.runs r
                        WHERE r.id = j.run_id AND r.status = 'running')
    ), fits AS (
        SELECT d.run_id, d.step_key, d.queue, d.rate, d.available_at FROM due d
        LEFT JOIN held h ON h.queue = d.queue
        LEFT JOIN recent rc ON rc.queue = d.queue
        WHERE (d.concurrency IS NULL OR d.nth <= d.concurrency - coalesce(h.n, 0))
            AND (d.rate IS NULL OR d.nth <= d.rate - coalesce(rc.n, 0))
        ORDER BY d.available_at
        LIMIT p_limit
    ), claimed AS (
        UPDATE @schema@.jobs j SET lease_owner = p_owner, lease_until = p_until,
            deliveries = j.deliveries + 1
        FROM fits f
        WHERE j.run_id = f.run_id AND j.step_key = f.step_key
            AND (j.lease_owner IS NULL OR j.lease_until < p_now)
        RETURNING j.run_id, j.step_key, j.function, j.deliveries, j.available_at, f.queue,
            f.rate
    ), logged AS (
        INSERT INTO @schema@.queue_admissions (queue, at)
        SELECT c.queue, p_now FROM claimed c WHERE c.rate IS NOT NULL
    )
    SELECT c.run_id, c.step_key, c.function, c.deliveries, c.available_at FROM claimed c;
END $$;

-- Start a schedule's due ticks and move its next tick, if nobody did since the caller
-- read it (p_expected: the next tick it read; NULL for a manual trigger, which moves no
-- tick and ignores the overlap policy). With p_skip, no tick starts while the schedule's
-- last run is queued or running, and one look starts at most one run. Returns the ids of
-- the runs started, or NULL when another process got there first.
CREATE FUNCTION @schema@.fire_schedule(
    p_name text, p_expected timestamptz, p_next timestamptz, p_runs @schema@.new_run[],
    p_skip boolean, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    s @schema@.schedules;
    n @schema@.new_run;
    live boolean := false;
    started text[] := ARRAY[]::text[];
    v_last text;
    v_last_tick timestamptz;
BEGIN
    SELECT * INTO s FROM @schema@.schedules WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_expected IS NOT NULL THEN
        IF s.status <> 'active' OR s.next_tick IS DISTINCT FROM p_expected THEN
            RETURN NULL;
        END IF;
        live := p_skip AND EXISTS (SELECT 1 FROM @schema@.runs r
                                   WHERE r.id = s.last_run_id
                                       AND r.status IN ('queued', 'running'));
    END IF;
    FOREACH n IN ARRAY p_runs LOOP
        EXIT WHEN live;
        IF @schema@.insert_run(n, p_now) THEN
            started := started || n.id;
            v_last := n.id;
            v_last_tick := n.scheduled_at;
            live := p_skip AND p_expected IS NOT NULL;
        END IF;
    END LOOP;
    UPDATE @schema@.schedules SET
        next_tick = CASE WHEN p_expected IS NULL THEN next_tick ELSE p_next END,
        last_tick = coalesce(v_last_tick, last_tick),
        last_run_id = coalesce(v_last, last_run_id),
        updated_at = p_now
    WHERE name = p_name;
    RETURN started;
END $$;
