-- plait schema for PostgreSQL, version 18: runs of a queue are admitted in start order.
-- description: a run's row keeps the order it was inserted in; admission breaks ties with it
--
-- admit_runs took runs of equal priority and start time in the order of their ids. The
-- children one pass starts are inserted in one commit, at one instant, and their ids are
-- taken from their steps, in no order, so those children were admitted in no order
-- either. A sequence now numbers every run as it is inserted (rows from before this
-- version have none, and they are older than every numbered row, so they go first), and
-- admit_runs is version 6's but for that tie-break. The default is set after the column
-- is added, so adding it rewrites no table.
CREATE SEQUENCE @schema@.runs_start_seq;
ALTER TABLE @schema@.runs ADD COLUMN start_seq bigint;
ALTER TABLE @schema@.runs ALTER COLUMN start_seq
    SET DEFAULT nextval('@schema@.runs_start_seq');
ALTER SEQUENCE @schema@.runs_start_seq OWNED BY @schema@.runs.start_seq;

CREATE OR REPLACE FUNCTION @schema@.admit_runs(
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
        SELECT r.id, r.start_seq, r.queue, r.queue_key, r.priority, r.wake_at, r.created_at,
            c.concurrency, c.per_key, c.rate,
            row_number() OVER (PARTITION BY r.queue, r.queue_key
                ORDER BY r.priority DESC, r.wake_at, r.created_at, r.start_seq NULLS FIRST,
                    r.id) AS nth_key
        FROM @schema@.runs r LEFT JOIN conf c ON c.name = r.queue
        WHERE r.status = 'queued' AND r.wake_at <= p_now
    ), key_fits AS (
        SELECT d.*, row_number() OVER (PARTITION BY d.queue
                ORDER BY d.priority DESC, d.wake_at, d.created_at, d.start_seq NULLS FIRST,
                    d.id) AS nth
        FROM due d LEFT JOIN active_keys k ON k.queue = d.queue AND k.queue_key = d.queue_key
        WHERE d.per_key IS NULL OR d.queue_key IS NULL
            OR d.nth_key <= d.per_key - coalesce(k.n, 0)
    ), fits AS (
        SELECT f.id, f.rate FROM key_fits f
        LEFT JOIN active a ON a.queue = f.queue
        LEFT JOIN recent rc ON rc.queue = f.queue
        WHERE (f.concurrency IS NULL OR f.nth <= f.concurrency - coalesce(a.n, 0))
            AND (f.rate IS NULL OR f.nth <= f.rate - coalesce(rc.n, 0))
        ORDER BY f.priority DESC, f.wake_at, f.created_at, f.start_seq NULLS FIRST, f.id
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
