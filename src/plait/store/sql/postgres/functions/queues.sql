-- Queues with limits. A run started through a queue, or to start later, is inserted
-- 'queued' with wake_at set to the time it may start. admit_runs moves queued runs to the
-- status it is given and leases them to the admitting worker in one statement, taking
-- only what the limits it is given allow (the limits are the worker's app.queue
-- declarations: the database stores rows, not policy). A queue's admissions are serialised by a
-- transaction-scoped advisory lock per queue name, taken before the counts are read, so
-- two workers never both see the last free slot. Nothing is held across user code.

-- Take the advisory locks of the given queues, in name order (every caller uses the same
-- order, so two admissions never wait for each other in a circle).
CREATE OR REPLACE FUNCTION @schema@.lock_queues(p_names text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT x FROM unnest(p_names) AS x ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(@channel@ || ':queue:' || q, 0));
    END LOOP;
END $$;

-- Admit up to p_limit due queued runs, highest priority first (then oldest start time,
-- then the order they were inserted in: the children one pass starts share an instant):
-- they become p_status (an admitted run's, as the runtime names it) and are leased to
-- p_owner. The limits of the queues the caller knows come as parallel arrays (NULL: no
-- such limit); a queue not among them has none. per_key applies to runs that have a key.
-- A run holds its queue slot from admission until it ends.
-- A fair queue (p_turn not NULL: what one admission costs a key; p_cost_* the keys whose
-- weights make theirs less) takes its keys in turn within a priority (start-time fair
-- queueing): a key arrives, when it has runs due and no turn, at the queue's clock; a
-- waiting run's turn is its key's finish + the runs of its key before it times its cost
-- (queue_turns), the smallest first; admitting moves the key's finish past its runs and
-- the clock (queue_clocks) to the start of the latest turn taken. The queue's runs keep
-- the places in the order across queues that its runs in start order would have had.
-- Only runs of the admitting worker's scope (p_workflows: NULL any, with p_graphs any
-- graph; p_queues: NULL any, a run of no queue in p_default_queue) whose workflow and
-- queue are not paused (brakes), and whose queue (p_held_queues[i], p_held_keys[i] NULL) or
-- queue and key (p_held_keys[i]) is not held (a spend budget reached). An admitted run
-- leaves its debounce window (debounce_key and debounce_until cleared): no later start
-- joins it, and a retry that makes it queued again does not hold the key a newer
-- debounced run of it waits with (runs_debounce).
DROP FUNCTION IF EXISTS @schema@.admit_runs(
    text, timestamptz, timestamptz, integer, text[], integer[], integer[], integer[], float8[],
    text);
DROP FUNCTION IF EXISTS @schema@.admit_runs(
    text, timestamptz, timestamptz, integer, text[], integer[], integer[], integer[], float8[],
    text, text[], boolean, text[], text);
CREATE OR REPLACE FUNCTION @schema@.admit_runs(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_names text[], p_concurrency integer[], p_per_key integer[], p_rate integer[],
    p_window float8[], p_status text, p_workflows text[], p_graphs boolean, p_queues text[],
    p_default_queue text, p_turn bigint[], p_cost_queues text[], p_cost_keys text[],
    p_costs bigint[], p_held_queues text[], p_held_keys text[]
) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    v_fair text[] := ARRAY(SELECT c.name FROM unnest(p_names, p_turn) AS c(name, turn)
                           WHERE c.turn IS NOT NULL);
BEGIN
    PERFORM @schema@.lock_queues(p_names);
    -- a new statement, so a new snapshot: it sees every admission committed before the
    -- locks were granted. A key of a fair queue whose runs are due and that has no turn
    -- yet arrives at the queue's clock.
    IF cardinality(v_fair) > 0 THEN
        INSERT INTO @schema@.queue_turns (queue, queue_key, finish)
        SELECT k.queue, k.queue_key, coalesce(qc.clock, 0)
        FROM (SELECT DISTINCT r.queue, coalesce(r.queue_key, '') AS queue_key
              FROM @schema@.runs r
              WHERE r.status = 'queued' AND r.wake_at <= p_now AND r.queue = ANY (v_fair)) k
        LEFT JOIN @schema@.queue_clocks qc ON qc.queue = k.queue
        WHERE NOT EXISTS (SELECT 1 FROM @schema@.queue_turns t
                          WHERE t.queue = k.queue AND t.queue_key = k.queue_key)
        ON CONFLICT (queue, queue_key) DO NOTHING;
    END IF;
    RETURN QUERY
    WITH conf AS (
        SELECT * FROM unnest(p_names, p_concurrency, p_per_key, p_rate, p_window, p_turn)
            AS c(name, concurrency, per_key, rate, rate_window, turn)
    ), costs AS (
        SELECT * FROM unnest(p_cost_queues, p_cost_keys, p_costs) AS k(queue, queue_key, cost)
    ), active AS (
        SELECT a.queue, count(*) AS n FROM @schema@.runs a
        WHERE a.queue = ANY (p_names) AND a.status IN ('running', 'suspended', 'paused')
        GROUP BY a.queue
    ), active_keys AS (
        SELECT a.queue, a.queue_key, count(*) AS n FROM @schema@.runs a
        JOIN conf c ON c.name = a.queue AND c.per_key IS NOT NULL
        WHERE a.status IN ('running', 'suspended', 'paused') AND a.queue_key IS NOT NULL
        GROUP BY a.queue, a.queue_key
    ), recent AS (
        SELECT q.queue, count(*) AS n FROM @schema@.queue_admissions q
        JOIN conf c ON c.name = q.queue AND c.rate IS NOT NULL
        WHERE q.at > p_now - make_interval(secs => c.rate_window)
        GROUP BY q.queue
    ), due AS (
        SELECT r.id, r.start_seq, r.queue, r.queue_key, r.priority, r.wake_at, r.created_at,
            c.concurrency, c.per_key, c.rate, c.turn,
            row_number() OVER (PARTITION BY r.queue, r.queue_key
                ORDER BY r.priority DESC, r.wake_at, r.created_at, r.start_seq NULLS FIRST,
                    r.id) AS nth_key
        FROM @schema@.runs r LEFT JOIN conf c ON c.name = r.queue
        WHERE r.status = 'queued' AND r.wake_at <= p_now
            AND (p_workflows IS NULL OR r.workflow = ANY (p_workflows)
                 OR (r.kind = 'graph' AND p_graphs))
            AND (p_queues IS NULL OR coalesce(r.queue, p_default_queue) = ANY (p_queues))
            AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                            WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default')))
            AND NOT EXISTS (SELECT 1 FROM unnest(p_held_queues, p_held_keys) AS h(queue, key)
                            WHERE h.queue = r.queue
                                AND (h.key IS NULL OR h.key = r.queue_key))
    ), turned AS (
        -- a fair queue's run with p_limit runs of its key before it cannot be admitted
        -- now: each of those comes before it
        -- ``tag`` is where its admission would end (the key's finish once admitted),
        -- ``tag - cost`` where it starts: the turn, which orders the runs
        SELECT d.*, coalesce(w.cost, d.turn) AS cost,
            t.finish + d.nth_key * coalesce(w.cost, d.turn) AS tag
        FROM (SELECT * FROM due WHERE turn IS NULL OR nth_key <= p_limit) d
        LEFT JOIN costs w ON w.queue = d.queue AND w.queue_key = d.queue_key
        LEFT JOIN @schema@.queue_turns t ON d.turn IS NOT NULL AND t.queue = d.queue
            AND t.queue_key = coalesce(d.queue_key, '')
    ), key_fits AS (
        SELECT d.*, row_number() OVER (PARTITION BY d.queue
                ORDER BY d.priority DESC, d.tag - d.cost, d.wake_at, d.created_at,
                    d.start_seq NULLS FIRST, d.id) AS nth
        FROM turned d LEFT JOIN active_keys k ON k.queue = d.queue AND k.queue_key = d.queue_key
        WHERE d.per_key IS NULL OR d.queue_key IS NULL
            OR d.nth_key <= d.per_key - coalesce(k.n, 0)
    ), fits AS (
        SELECT f.* FROM key_fits f
        LEFT JOIN active a ON a.queue = f.queue
        LEFT JOIN recent rc ON rc.queue = f.queue
        WHERE (f.concurrency IS NULL OR f.nth <= f.concurrency - coalesce(a.n, 0))
            AND (f.rate IS NULL OR f.nth <= f.rate - coalesce(rc.n, 0))
    ), ranked AS (
        -- a fair queue's runs, numbered by turn and by start order within a priority
        SELECT f.*,
            row_number() OVER (PARTITION BY f.queue, f.priority
                ORDER BY f.tag - f.cost, f.wake_at, f.created_at, f.start_seq NULLS FIRST,
                    f.id) AS by_turn,
            row_number() OVER (PARTITION BY f.queue, f.priority
                ORDER BY f.wake_at, f.created_at, f.start_seq NULLS FIRST, f.id) AS by_start
        FROM fits f WHERE f.turn IS NOT NULL
    ), placed AS (
        SELECT f.id, f.rate, f.tag, f.cost, f.priority, f.wake_at AS at,
            f.created_at AS created, f.start_seq AS seq, f.id AS tie
        FROM fits f WHERE f.turn IS NULL
        UNION ALL
        -- the n-th in turn takes the place of the n-th in start order
        SELECT a.id, a.rate, a.tag, a.cost, a.priority, b.wake_at, b.created_at,
            b.start_seq, b.id
        FROM ranked a JOIN ranked b ON b.queue = a.queue AND b.priority = a.priority
            AND b.by_start = a.by_turn
    ), chosen AS (
        SELECT p.* FROM placed p
        ORDER BY p.priority DESC, p.at, p.created, p.seq NULLS FIRST, p.tie
        LIMIT p_limit
    ), admitted AS (
        UPDATE @schema@.runs r SET status = p_status, lease_owner = p_owner,
            lease_until = p_until, wake_at = p_now, admitted_at = p_now, updated_at = p_now,
            debounce_key = NULL, debounce_until = NULL
        FROM chosen f WHERE r.id = f.id AND r.status = 'queued'
        RETURNING r.id, r.queue, r.queue_key, f.rate, f.tag, f.cost
    ), logged AS (
        INSERT INTO @schema@.queue_admissions (queue, at)
        SELECT a.queue, p_now FROM admitted a WHERE a.rate IS NOT NULL
    ), pruned AS (
        DELETE FROM @schema@.queue_admissions q USING conf c
        WHERE c.name = q.queue AND c.rate IS NOT NULL
            AND q.at <= p_now - make_interval(secs => c.rate_window)
    ), served AS (
        INSERT INTO @schema@.queue_turns AS t (queue, queue_key, finish)
        SELECT a.queue, coalesce(a.queue_key, ''), max(a.tag) FROM admitted a
        WHERE a.tag IS NOT NULL GROUP BY 1, 2
        ON CONFLICT (queue, queue_key) DO UPDATE SET finish = excluded.finish
    ), clocked AS (
        INSERT INTO @schema@.queue_clocks AS q (queue, clock)
        SELECT a.queue, max(a.tag - a.cost) FROM admitted a WHERE a.tag IS NOT NULL
        GROUP BY 1
        ON CONFLICT (queue) DO UPDATE SET clock = greatest(q.clock, excluded.clock)
    )
    SELECT a.id FROM admitted a;
    -- a key with no runs due that the clock has passed is the same as no key: forget it.
    -- A key a budget holds, or whose runs a brake holds (their workflow paused), has no
    -- runs due either: when it comes back it starts at the clock, with no turns saved up
    -- to spend in a burst
    IF cardinality(v_fair) > 0 THEN
        DELETE FROM @schema@.queue_turns t USING @schema@.queue_clocks q
        WHERE q.queue = t.queue AND t.finish <= q.clock AND t.queue = ANY (v_fair)
            AND (t.queue, t.queue_key) NOT IN (
                SELECT r.queue, coalesce(r.queue_key, '') FROM @schema@.runs r
                WHERE r.status = 'queued' AND r.wake_at <= p_now AND r.queue = ANY (v_fair)
                    AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                        OR (b.kind = 'queue' AND b.name = r.queue))
                    AND NOT EXISTS (
                        SELECT 1 FROM unnest(p_held_queues, p_held_keys) AS h(queue, key)
                        WHERE h.queue = r.queue AND (h.key IS NULL OR h.key = r.queue_key)));
    END IF;
END $$;

-- Lease up to p_limit due jobs of functions admitted through limited queues (function
-- p_functions[i] belongs to queue p_function_queues[i]). A job holds its queue slot while
-- its lease runs: a worker that dies gives the slot back when the lease expires. A job of a
-- held queue (p_held_queues[i]), or of a run whose key is held in it (p_held_keys[i]),
-- waits (a spend budget reached).
CREATE OR REPLACE FUNCTION @schema@.claim_queue_jobs(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_names text[], p_concurrency integer[], p_rate integer[], p_window float8[],
    p_functions text[], p_function_queues text[], p_held_queues text[], p_held_keys text[]
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
                        WHERE r.id = j.run_id AND r.status = 'running'
                            AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                                WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                    OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))
                                    OR (b.kind = 'queue' AND b.name = m.queue))
                            AND NOT EXISTS (SELECT 1
                                FROM unnest(p_held_queues, p_held_keys) AS h(queue, key)
                                WHERE h.queue = m.queue
                                    AND (h.key IS NULL OR h.key = r.queue_key)))
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
