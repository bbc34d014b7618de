-- The statements of the PostgreSQL store (store/postgres/). Each block starts with
-- "-- name: <name>"; @schema@ is the quoted schema name. Times are timestamptz on the
-- server and unix seconds in Python (a connection codec converts them). A list of values
-- is one array parameter (= ANY ($n::text[])), so a statement's text never depends on how
-- many values it gets.

-- == the schema and its version ==============================================================

-- name: schema_version_table
SELECT to_regclass('@schema@.schema_version')

-- name: schema_version
SELECT coalesce(max(version), 0) FROM @schema@.schema_version

-- name: lock_schema
-- Held until the migration's transaction ends: processes starting together migrate once.
SELECT pg_advisory_xact_lock($1)

-- name: schema_exists
SELECT 1 FROM pg_namespace WHERE nspname = $1

-- name: create_schema
CREATE SCHEMA @schema@

-- name: create_schema_version_table
CREATE TABLE IF NOT EXISTS @schema@.schema_version (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: record_schema_version
INSERT INTO @schema@.schema_version (version, description) VALUES ($1, $2)

-- name: create_functions_version_table
-- The functions (functions/*.sql) a database has: the version and digest of the plait
-- that applied them last.
CREATE TABLE IF NOT EXISTS @schema@.functions_version (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL,
    digest text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: functions_version_table
SELECT to_regclass('@schema@.functions_version')

-- name: functions_version
SELECT version, digest FROM @schema@.functions_version

-- name: functions_to_drop
-- A DROP statement for every function of schema $1 named in $2, whatever its arguments, so
-- that the functions are created anew (a new signature leaves no old one behind). Trigger
-- functions stay (a trigger depends on them, and their signature never changes): CREATE OR
-- REPLACE replaces them.
SELECT format('DROP FUNCTION %s', p.oid::regprocedure)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[])
    AND p.prorettype <> 'trigger'::regtype
ORDER BY p.oid

-- name: record_functions_version
INSERT INTO @schema@.functions_version (id, version, digest) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, digest = excluded.digest,
    applied_at = excluded.applied_at

-- == runs ====================================================================================

-- name: select_run
SELECT r FROM @schema@.runs r WHERE r.id = $1

-- name: select_runs
-- Runs read at once by many callers (one row each that exists, in no order).
SELECT r FROM @schema@.runs r WHERE r.id = ANY($1::text[])

-- name: live_dedup_run
SELECT id FROM @schema@.runs
WHERE dedup = $1 AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention')

-- name: run_statuses
-- The runs that exist among many, with their status (for the end-watch poll).
SELECT id, status FROM @schema@.runs WHERE id = ANY($1::text[])

-- name: create_run
SELECT created, run FROM @schema@.create_run($1::@schema@.new_run, $2)

-- name: create_runs
-- Runs started together, in the order given (a row each).
SELECT created, run FROM @schema@.create_runs($1::@schema@.new_run[], $2)

-- name: create_all_runs
-- The runs of one start_many, all or none (PLT06: an id of another workflow's run).
SELECT created, run FROM @schema@.create_all_runs($1::@schema@.new_run[], $2)

-- name: replace_run
-- A start that replaces the live run holding its de-duplication key.
SELECT created, run, moved FROM @schema@.replace_run($1::@schema@.new_run, $2, $3::@schema@.op)

-- name: run_filter
-- The conditions of store.rows.RunFilter on a runs row r, which list_runs and
-- list_run_summaries hold in place of /*filters*/ (postgres/runs.py puts them there): a
-- filter left NULL (or $12, top_level, or $13, hide_continued, false) matches every run
-- ($6 is visible_to: the runs of that owner and the ones without an owner, and with $15,
-- visible_schedule_runs, those of schedules without an owner, owned 'schedule:<name>'
-- (plait.ids.schedule_owner); $9 a text the id holds, any case; $10 and $11 bound
-- created_at; $14 the queue).
($1::text IS NULL OR r.workflow = $1) AND ($2::text IS NULL OR r.status = $2)
    AND ($3::text IS NULL OR r.version = $3) AND ($4::text IS NULL OR r.owner = $4)
    AND ($5::text IS NULL OR r.parent_run_id = $5)
    AND ($6::text IS NULL OR r.owner IS NULL OR r.owner = $6
         OR ($15::boolean AND left(r.owner, 9) = 'schedule:'))
    AND ($9::text IS NULL OR strpos(lower(r.id), lower($9)) > 0)
    AND ($10::timestamptz IS NULL OR r.created_at >= $10)
    AND ($11::timestamptz IS NULL OR r.created_at < $11)
    AND (NOT $12::boolean OR r.parent_run_id IS NULL)
    AND (NOT $13::boolean OR r.continued_to IS NULL)
    AND ($14::text IS NULL OR r.queue = $14)

-- name: tag_filter
-- The condition of RunFilter.tags on a runs row r ($16 keys, $17 values), added to
-- run_filter when a listing has tags: the first pair found through run_tags' (key,
-- value, run_id) index, the others checked on each run.
r.id IN (SELECT t.run_id FROM @schema@.run_tags t
         WHERE t.key = ($16::text[])[1] AND t.value = ($17::text[])[1])
    AND NOT EXISTS (SELECT 1 FROM unnest($16::text[], $17::text[]) AS p(k, v)
                    WHERE NOT EXISTS (SELECT 1 FROM @schema@.run_tags o
                        WHERE o.run_id = r.id AND o.key = p.k AND o.value = p.v))

-- name: list_runs
-- Newest first, and how many match in all: the runs that pass /*filters*/ (run_filter,
-- and tag_filter with tags).
SELECT
    (SELECT count(*) FROM @schema@.runs r WHERE /*filters*/) AS total,
    ARRAY(SELECT r FROM @schema@.runs r
          WHERE /*filters*/
          ORDER BY r.created_at DESC, r.id DESC LIMIT $7 OFFSET $8) AS runs

-- name: count_by_status
-- How many runs match in each status: the runs that pass /*filters*/ (run_filter, and
-- tag_filter with tags), the status filter left out by the caller; $7 and $8 page the
-- statuses (the caller asks for all of them).
SELECT r.status, count(*) AS runs FROM @schema@.runs r WHERE /*filters*/
GROUP BY r.status ORDER BY r.status LIMIT $7 OFFSET $8

-- name: list_run_summaries
-- As list_runs, without the JSON columns (convert.run_summary's column order), with how
-- many children of each run the caller may see.
SELECT
    (SELECT count(*) FROM @schema@.runs r WHERE /*filters*/) AS total,
    ARRAY(SELECT ROW(r.id, r.workflow, r.kind, r.status, r.version, r.owner,
                     r.parent_run_id, r.created_at, r.updated_at, r.queue, r.queue_key,
                     r.priority, r.scheduled_at, r.admitted_at, r.wake_at,
                     (SELECT count(*) FROM @schema@.runs c WHERE c.parent_run_id = r.id
                          AND ($6::text IS NULL OR c.owner IS NULL OR c.owner = $6
                               OR ($15::boolean AND left(c.owner, 9) = 'schedule:'))),
                     r.tags)
          FROM @schema@.runs r
          WHERE /*filters*/
          ORDER BY r.created_at DESC, r.id DESC LIMIT $7 OFFSET $8) AS runs

-- name: get_children
-- The newest children of a run.
SELECT r FROM @schema@.runs r WHERE r.parent_run_id = $1
ORDER BY r.created_at DESC, r.id DESC LIMIT $2

-- name: get_steps
SELECT s FROM @schema@.steps s WHERE s.run_id = $1 ORDER BY s.seq

-- name: waiting_steps
-- The steps of many runs ($1) of the kinds $2 in the statuses $3, in run and step order:
-- what a page of runs waits on, in one read.
SELECT s FROM @schema@.steps s
WHERE s.run_id = ANY($1::text[]) AND s.kind = ANY($2::text[]) AND s.status = ANY($3::text[])
ORDER BY s.run_id, s.seq

-- name: get_history
-- Earlier attempts from attempts, the latest of each step from its step row; oldest first,
-- attempts that started at one instant (a clock that stands still) in step order.
SELECT run_id, key, attempt, status, output, error, started_at, finished_at, worker FROM (
    SELECT a.run_id, a.key, a.attempt, a.status, a.output, a.error, a.started_at,
        a.finished_at, a.worker, s.seq
    FROM @schema@.attempts a JOIN @schema@.steps s ON s.run_id = a.run_id AND s.key = a.key
    WHERE a.run_id = $1
    UNION ALL
    SELECT run_id, key, attempts, attempt_status,
        CASE WHEN attempt_status = 'succeeded' THEN output END, attempt_error,
        attempt_started, attempt_finished, worker, seq
    FROM @schema@.steps WHERE run_id = $1 AND attempt_status IS NOT NULL
) AS h
ORDER BY started_at, seq, attempt

-- name: load_passes
-- Everything a pass reads, in one round trip and one snapshot, for one run or for passes
-- starting at once: a row for each run that exists, in no order.
SELECT r.id, r,
    ARRAY(SELECT s FROM @schema@.steps s WHERE s.run_id = r.id) AS steps,
    ARRAY(SELECT e FROM @schema@.events e
          WHERE e.run_id = r.id AND e.consumed_by IS NULL ORDER BY e.id) AS events,
    ARRAY(SELECT st FROM @schema@.state st WHERE st.run_id = r.id) AS state,
    ARRAY(SELECT q FROM @schema@.requests q
          WHERE q.run_id = r.id AND q.status = 'sent' ORDER BY q.id) AS requests
FROM @schema@.runs r WHERE r.id = ANY($1::text[])

-- name: list_passes
-- As load_passes, for a page of runs in one of the statuses $1 of kind $2 (of workflow $3
-- when given) whose ids come after $4, in id order.
SELECT r.id, r,
    ARRAY(SELECT s FROM @schema@.steps s WHERE s.run_id = r.id) AS steps,
    ARRAY(SELECT e FROM @schema@.events e
          WHERE e.run_id = r.id AND e.consumed_by IS NULL ORDER BY e.id) AS events,
    ARRAY(SELECT st FROM @schema@.state st WHERE st.run_id = r.id) AS state
FROM @schema@.runs r
WHERE r.status = ANY($1::text[]) AND r.kind = $2 AND ($3::text IS NULL OR r.workflow = $3)
    AND r.id > $4
ORDER BY r.id LIMIT $5

-- name: claim_run
-- Only a run of the claimer's scope (its app's workflows, its queues: $5-$8) whose
-- workflow and queue are not paused (brakes).
UPDATE @schema@.runs SET lease_owner = $2, lease_until = $3
WHERE id = $1 AND status = 'running' AND (lease_owner IS NULL OR lease_until < $4)
    AND ($5::text[] IS NULL OR workflow = ANY ($5::text[]) OR (kind = 'graph' AND $6::boolean))
    AND ($7::text[] IS NULL OR coalesce(queue, $8::text) = ANY ($7::text[]))
    AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))
RETURNING id

-- name: claim_due_runs
-- Only runs of the claimer's scope ($5-$8) whose workflow and queue are not paused: the
-- function claim_due_runs, which claim_due_passes shares.
SELECT id FROM @schema@.claim_due_runs($1, $2, $3, $4, $5, $6, $7, $8) AS id

-- name: claim_due_passes
-- claim_due_runs with each claimed run's load_passes row, in one round trip (the
-- function says why the snapshot is read after the claim).
SELECT * FROM @schema@.claim_due_passes($1, $2, $3, $4, $5, $6, $7, $8)
    AS c (id text, r @schema@.runs, steps @schema@.steps[], events @schema@.events[],
          state @schema@.state[], requests @schema@.requests[])

-- name: commit_batch
SELECT @schema@.commit_batch($1, $2, $3::@schema@.op[], $4)

-- name: commit_steps
SELECT @schema@.commit_steps($1, $2, $3::@schema@.op[], $4)

-- name: commit_first_attempts
-- commit_steps as one statement, for a batch of step writes whose attempts are all first
-- attempts (the store checks): no earlier attempt moves to attempts, so only the steps
-- are written, as apply_step_ops (functions/steps.sql) writes them. Every sequential step
-- commits this way. The steps come as plain values, one row of the steps table each, its
-- attempt columns filled as apply_step_ops fills them from an op: the server then decodes
-- no composite and selects no field, and the client encodes no record (about a fifth of a
-- step's write on either side). This text holds one row; the store adds a row of
-- parameters, untyped (the first row types the columns), for each further step. Once
-- written, whether the run has ended: then no attempt was started or interrupted (a row
-- that starts one, with attempt_started, or whose attempt_status is 'interrupted' is left
-- out, as commit_steps leaves out those ops). NULL, with nothing written, when $2 no longer holds the lease (the
-- run's row is locked first, as in commit_steps).
WITH fence AS (
    SELECT status IN ('completed', 'failed', 'cancelled', 'continued') AS ended
    FROM @schema@.runs WHERE id = $1 AND lease_owner = $2 FOR UPDATE
), written AS (
    INSERT INTO @schema@.steps (run_id, key, seq, name, kind, function, status, input, output,
        error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
        branch, from_key, queued, wake_at, created_at, updated_at, delivered,
        retried_failures, reached_after, worker, attempt_status, attempt_error,
        attempt_started, attempt_finished)
    SELECT * FROM (VALUES ($3::text, $4::text, $5::integer, $6::text, $7::text, $8::text,
        $9::text, $10::json, $11::json, $12::json, $13::integer, $14::integer,
        $15::integer, $16::double precision, $17::double precision, $18::text, $19::text,
        $20::text, $21::text, $22::boolean, $23::timestamptz, $24::timestamptz,
        $25::timestamptz, $26::integer, $27::integer, $28::json, $29::text, $30::text,
        $31::json, $32::timestamptz, $33::timestamptz)) AS u (run_id, key, seq, name, kind,
        function, status, input, output, error, attempts, failures, retries, retry_delay,
        timeout, invocation_id, child_run_id, branch, from_key, queued, wake_at, created_at,
        updated_at, delivered, retried_failures, reached_after, worker, attempt_status,
        attempt_error, attempt_started, attempt_finished)
    WHERE EXISTS (
        SELECT FROM fence
        WHERE NOT ended OR (u.attempt_started IS NULL
            AND coalesce(u.attempt_status, '') <> 'interrupted')
    )
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at, delivered = excluded.delivered,
        retried_failures = excluded.retried_failures,
        worker = CASE WHEN excluded.attempt_started IS NOT NULL THEN excluded.worker
            ELSE steps.worker END,
        attempt_status = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_status
            WHEN excluded.attempt_started IS NOT NULL THEN excluded.attempt_status
            WHEN steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_status END,
        attempt_error = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_error
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_error END,
        attempt_started = CASE WHEN excluded.attempt_started IS NOT NULL
            THEN excluded.attempt_started ELSE steps.attempt_started END,
        attempt_finished = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_finished
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_finished END
)
SELECT ended FROM fence

-- name: commit_first_attempts_consuming
-- commit_first_attempts for a batch that also takes one event (event $3 for step $4, as
-- apply_ops' consume_event takes it): the step after a wait for an event, whose batch ends
-- the wait's step, takes its event and starts the next step's first attempt. The event is
-- taken only under the lease, and the steps are written only if it was taken, so that
-- either all of the batch is written or none of it. The steps' row of parameters starts at
-- $5. Once written: whether the run has ended (as commit_first_attempts), and whether the
-- event was taken (false: another pass took it first, and nothing was written). No row,
-- with nothing written, when $2 no longer holds the lease.
WITH fence AS (
    SELECT status IN ('completed', 'failed', 'cancelled', 'continued') AS ended
    FROM @schema@.runs WHERE id = $1 AND lease_owner = $2 FOR UPDATE
), consumed AS (
    UPDATE @schema@.events SET consumed_by = $4::text
    WHERE id = $3::bigint AND consumed_by IS NULL AND EXISTS (SELECT FROM fence)
    RETURNING id
), written AS (
    INSERT INTO @schema@.steps (run_id, key, seq, name, kind, function, status, input, output,
        error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
        branch, from_key, queued, wake_at, created_at, updated_at, delivered,
        retried_failures, reached_after, worker, attempt_status, attempt_error,
        attempt_started, attempt_finished)
    SELECT * FROM (VALUES ($5::text, $6::text, $7::integer, $8::text, $9::text, $10::text,
        $11::text, $12::json, $13::json, $14::json, $15::integer, $16::integer,
        $17::integer, $18::double precision, $19::double precision, $20::text, $21::text,
        $22::text, $23::text, $24::boolean, $25::timestamptz, $26::timestamptz,
        $27::timestamptz, $28::integer, $29::integer, $30::json, $31::text, $32::text,
        $33::json, $34::timestamptz, $35::timestamptz)) AS u (run_id, key, seq, name, kind,
        function, status, input, output, error, attempts, failures, retries, retry_delay,
        timeout, invocation_id, child_run_id, branch, from_key, queued, wake_at, created_at,
        updated_at, delivered, retried_failures, reached_after, worker, attempt_status,
        attempt_error, attempt_started, attempt_finished)
    WHERE EXISTS (
        SELECT FROM fence
        WHERE NOT ended OR (u.attempt_started IS NULL
            AND coalesce(u.attempt_status, '') <> 'interrupted')
    ) AND EXISTS (SELECT FROM consumed)
    ON CONFLICT (run_id, key) DO UPDATE SET
        kind = excluded.kind, function = excluded.function, status = excluded.status,
        input = excluded.input, output = excluded.output, error = excluded.error,
        attempts = excluded.attempts, failures = excluded.failures,
        retries = excluded.retries, retry_delay = excluded.retry_delay,
        timeout = excluded.timeout, child_run_id = excluded.child_run_id,
        branch = excluded.branch, queued = excluded.queued, wake_at = excluded.wake_at,
        updated_at = excluded.updated_at, delivered = excluded.delivered,
        retried_failures = excluded.retried_failures,
        worker = CASE WHEN excluded.attempt_started IS NOT NULL THEN excluded.worker
            ELSE steps.worker END,
        attempt_status = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_status
            WHEN excluded.attempt_started IS NOT NULL THEN excluded.attempt_status
            WHEN steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_status END,
        attempt_error = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_error
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_error END,
        attempt_started = CASE WHEN excluded.attempt_started IS NOT NULL
            THEN excluded.attempt_started ELSE steps.attempt_started END,
        attempt_finished = CASE
            WHEN excluded.attempt_status IS NULL THEN steps.attempt_finished
            WHEN excluded.attempt_started IS NOT NULL OR steps.attempt_status IS NULL THEN NULL
            ELSE excluded.attempt_finished END
)
SELECT ended, EXISTS (SELECT FROM consumed) AS consumed FROM fence

-- name: commit_and_release
SELECT @schema@.commit_and_release($1, $2, $3::@schema@.op[], $4, $5)

-- name: commit_group
SELECT @schema@.commit_group($1, $2, $3, $4, $5, $6::@schema@.op[], $7)

-- name: release_run
-- Give the run back. It is due again at once if someone woke it during the pass
-- (wakeups moved), else when its earliest timer fires; the last column says "due now".
UPDATE @schema@.runs SET lease_owner = NULL, lease_until = NULL, wake_at = CASE
    WHEN status <> 'running' THEN NULL
    WHEN wakeups <> $3 THEN $4
    ELSE (SELECT min(t.wake_at) FROM @schema@.timers t WHERE t.run_id = runs.id) END
WHERE id = $1 AND lease_owner = $2
RETURNING wake_at IS NOT NULL AND wake_at <= $4

-- name: renew_leases
-- Extend the leases this owner holds on the runs it drives ($4, by id: no index holds a
-- run's lease) and on its jobs. Rows say what the renewal found: 'ended', runs that ended
-- meanwhile (cancelled from elsewhere), whose work in this process must stop; 'lost',
-- runs of $4 whose lease is not this owner's; 'job', the jobs it holds (id, key).
WITH runs_renewed AS (
    UPDATE @schema@.runs SET lease_until = $2
    WHERE id = ANY($4::text[]) AND lease_owner = $1
    RETURNING id, status
), jobs_renewed AS (
    UPDATE @schema@.jobs SET lease_until = $2 WHERE lease_owner = $1
    RETURNING run_id, step_key
)
(SELECT 'ended' AS what, id, '' AS key FROM runs_renewed WHERE status <> 'running'
UNION
SELECT 'ended', id, '' FROM @schema@.runs WHERE id = ANY($3::text[])
    AND status IN ('completed', 'failed', 'cancelled', 'continued'))
UNION ALL
SELECT 'lost', h.id, '' FROM unnest($4::text[]) AS h (id)
WHERE h.id NOT IN (SELECT id FROM runs_renewed)
UNION ALL
SELECT 'job', run_id, step_key FROM jobs_renewed

-- name: leases_of
-- Leases held under a worker id ($1 is "<worker id>#") by other processes than $2: an
-- earlier life of a restarted worker, or a twin still draining.
-- Only a live run is worked under its lease (and live runs are found by the status index,
-- as no index holds a lease).
SELECT 'run' AS kind, id AS run_id, '' AS key, lease_owner, lease_until
FROM @schema@.runs
WHERE status IN ('running', 'suspended') AND lease_owner IS NOT NULL
    AND left(lease_owner, length($1)) = $1 AND lease_owner <> $2
UNION ALL
SELECT 'job', run_id, step_key, lease_owner, lease_until
FROM @schema@.jobs
WHERE lease_owner IS NOT NULL AND left(lease_owner, length($1)) = $1 AND lease_owner <> $2

-- name: release_leases
-- A stopping worker ($1) gives back the runs it held among $2 (due at once if still
-- running) and its jobs; returns how many leases it gave back.
WITH runs_back AS (
    UPDATE @schema@.runs SET lease_owner = NULL, lease_until = NULL,
        wake_at = CASE WHEN status = 'running' THEN $3::timestamptz ELSE NULL END
    WHERE id = ANY($2::text[]) AND lease_owner = $1
    RETURNING 1
), jobs_back AS (
    UPDATE @schema@.jobs SET lease_owner = NULL, lease_until = NULL
    WHERE lease_owner = $1
    RETURNING 1
)
SELECT (SELECT count(*) FROM runs_back) + (SELECT count(*) FROM jobs_back)

-- name: expire_leases
-- Expire the given leases if nobody renewed them since they were read (their holder is
-- dead), so their runs and steps are taken over now; returns how many were expired.
WITH given AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
        AS g(kind, run_id, key, owner, until)
), expired_runs AS (
    UPDATE @schema@.runs r SET lease_until = $6 FROM given g
    WHERE g.kind = 'run' AND r.id = g.run_id AND r.lease_owner = g.owner
        AND r.lease_until = g.until
    RETURNING 1
), expired_jobs AS (
    UPDATE @schema@.jobs j SET lease_until = $6 FROM given g
    WHERE g.kind = 'job' AND j.run_id = g.run_id AND j.step_key = g.key
        AND j.lease_owner = g.owner AND j.lease_until = g.until
    RETURNING 1
)
SELECT (SELECT count(*) FROM expired_runs) + (SELECT count(*) FROM expired_jobs)

-- name: sweep_idle
-- Re-drive running runs that nothing will wake (no lease, no wake_at, no timer, no job);
-- each run's sweeps back off: base seconds doubling up to cap.
WITH swept AS (
    UPDATE @schema@.runs SET wake_at = $1, updated_at = $1, idle_sweeps = idle_sweeps + 1
    WHERE id IN (
        SELECT r.id FROM @schema@.runs r
        WHERE r.status = 'running' AND r.wake_at IS NULL AND r.lease_owner IS NULL
            AND r.updated_at < $1::timestamptz - make_interval(
                secs => least($2::float8, $3::float8 * power(2, least(r.idle_sweeps, 20))))
            AND NOT EXISTS (SELECT 1 FROM @schema@.timers t WHERE t.run_id = r.id)
            AND NOT EXISTS (SELECT 1 FROM @schema@.jobs j WHERE j.run_id = r.id)
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id
)
SELECT count(*) FROM swept

-- name: next_due_runs
-- When the next pass becomes due (a leased run: when its lease runs out).
-- Only runs the claimer may claim (claim_due_runs' scope and brakes).
SELECT least(
    (SELECT min(wake_at) FROM @schema@.runs
     WHERE wake_at IS NOT NULL AND status = 'running' AND lease_owner IS NULL
        AND ($1::text[] IS NULL OR workflow = ANY ($1::text[]) OR (kind = 'graph' AND $2::boolean))
    AND ($3::text[] IS NULL OR coalesce(queue, $4::text) = ANY ($3::text[]))
    AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))),
    (SELECT min(greatest(wake_at, lease_until)) FROM @schema@.runs
     WHERE wake_at IS NOT NULL AND status = 'running' AND lease_owner IS NOT NULL
        AND ($1::text[] IS NULL OR workflow = ANY ($1::text[]) OR (kind = 'graph' AND $2::boolean))
    AND ($3::text[] IS NULL OR coalesce(queue, $4::text) = ANY ($3::text[]))
    AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default'))))
)

-- name: job_depths
-- Jobs a worker could claim now (claim_step_jobs' test), per function: due, of a running
-- run, and held by no live lease. A retry's back-off is not waiting for a worker.
SELECT j.function, count(*) FROM @schema@.jobs j
WHERE j.available_at <= $1 AND (j.lease_owner IS NULL OR j.lease_until < $1)
    AND EXISTS (SELECT 1 FROM @schema@.runs r WHERE r.id = j.run_id AND r.status = 'running')
GROUP BY j.function

-- name: pending_work
-- Leases held on running runs and their jobs; when the next wake-up of a running run or
-- job of these functions is due; the earliest start of a queued run, the next tick of an
-- active schedule and the earliest deadline of a live run: what a virtual clock looks at
-- before it jumps.
SELECT
    (SELECT count(*) FROM @schema@.runs WHERE lease_owner IS NOT NULL AND status = 'running')
    + (SELECT count(*) FROM @schema@.jobs j WHERE j.lease_owner IS NOT NULL
       AND EXISTS (SELECT 1 FROM @schema@.runs r WHERE r.id = j.run_id AND r.status = 'running')),
    least(
        (SELECT min(wake_at) FROM @schema@.runs WHERE wake_at IS NOT NULL AND status = 'running'),
        (SELECT min(j.available_at) FROM @schema@.jobs j
         WHERE j.function = ANY ($1::text[])
             AND EXISTS (SELECT 1 FROM @schema@.runs r
                         WHERE r.id = j.run_id AND r.status = 'running'))
    ),
    (SELECT min(wake_at) FROM @schema@.runs WHERE status = 'queued'),
    (SELECT min(next_tick) FROM @schema@.schedules WHERE status = 'active'),
    (SELECT min(deadline_at) FROM @schema@.runs WHERE deadline_at IS NOT NULL
     AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))

-- name: next_due_jobs
-- When the next queued step of these functions becomes due (held: when its lease runs out);
-- jobs of runs that are not running (suspended) wait for a resume.
SELECT least(
    (SELECT min(j.available_at) FROM @schema@.jobs j
     WHERE j.lease_owner IS NULL AND j.function = ANY ($1::text[])
         AND EXISTS (SELECT 1 FROM @schema@.runs r
                     WHERE r.id = j.run_id AND r.status = 'running'
                         AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                             WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                 OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))))),
    (SELECT min(greatest(j.available_at, j.lease_until)) FROM @schema@.jobs j
     WHERE j.lease_owner IS NOT NULL AND j.function = ANY ($1::text[])
         AND EXISTS (SELECT 1 FROM @schema@.runs r
                     WHERE r.id = j.run_id AND r.status = 'running'
                         AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                             WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                 OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default')))))
)

-- name: claim_step_jobs
-- Lease due jobs of these functions whose run is running; each comes with its step's row
-- (NULL if the step is gone) and its run's workflow and trace, read in the same statement.
WITH claimed AS (
    UPDATE @schema@.jobs SET lease_owner = $1, lease_until = $2, deliveries = deliveries + 1
    WHERE (run_id, step_key) IN (
        SELECT j.run_id, j.step_key FROM @schema@.jobs j
        WHERE j.available_at <= $3 AND (j.lease_owner IS NULL OR j.lease_until < $3)
            AND j.function = ANY ($5::text[])
            AND EXISTS (SELECT 1 FROM @schema@.runs r
                        WHERE r.id = j.run_id AND r.status = 'running'
                         AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                             WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                 OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))))
            -- $6: the queue of each function of $5 (a job of a paused queue waits)
            AND NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[]) AS m(fn, queue)
                            JOIN @schema@.brakes b ON b.kind = 'queue' AND b.name = m.queue
                            WHERE m.fn = j.function)
        ORDER BY j.available_at LIMIT $4
        FOR UPDATE SKIP LOCKED
    )
    RETURNING run_id, step_key, function, deliveries, available_at
)
SELECT c.run_id, c.step_key, c.function, c.deliveries, s, r.workflow, r.trace, r.queue
FROM claimed c LEFT JOIN @schema@.steps s ON s.run_id = c.run_id AND s.key = c.step_key
    LEFT JOIN @schema@.runs r ON r.id = c.run_id
ORDER BY c.available_at

-- name: begin_queued_step
SELECT @schema@.begin_queued_step($1, $2, $3, $4::@schema@.op[], $5)

-- name: finish_queued_step
SELECT @schema@.finish_queued_step($1, $2, $3, $4::@schema@.op[], $5)

-- name: drop_job
-- Only while the job is still the caller's: a job enqueued again since is left alone.
DELETE FROM @schema@.jobs WHERE run_id = $1 AND step_key = $2 AND lease_owner = $3

-- name: lost_jobs
-- Of the jobs ($1 run ids, $2 step keys) $3 runs, those it no longer holds: their run's
-- pass cancelled them, their run ended, or another worker took them.
SELECT g.run_id, g.step_key FROM unnest($1::text[], $2::text[]) AS g(run_id, step_key)
WHERE NOT EXISTS (SELECT 1 FROM @schema@.jobs j WHERE j.run_id = g.run_id
                  AND j.step_key = g.step_key AND j.lease_owner = $3)

-- name: repair_job
-- A job that names the wrong function goes back on the queue under the right one.
UPDATE @schema@.jobs SET function = $3, lease_owner = NULL, lease_until = NULL
WHERE run_id = $1 AND step_key = $2 AND lease_owner = $4

-- name: wake
SELECT @schema@.wake_run($1, $2, $3)

-- name: cancel_run
SELECT @schema@.cancel_run($1, $2, $3, $4::@schema@.step_end, $5::@schema@.cancel_cut, $6)

-- name: time_out_run
SELECT @schema@.time_out_run($1, $2, $3, $4::@schema@.step_end, $5::@schema@.cancel_cut,
    $6, $7, $8::@schema@.step_end, $9)

-- name: due_deadlines
-- Live runs past their deadline (with it), soonest first: the queued, running and
-- suspended ones through the deadline index, the paused and parked ones (few, and outside
-- that index) through the status index. A child whose live parent is past its own deadline
-- too is left to the parent's time-out, which cancels it.
SELECT d.id, d.deadline_at FROM (
    SELECT r.id, r.deadline_at, r.parent_run_id FROM @schema@.runs r
    WHERE r.deadline_at <= $1 AND r.deadline_at IS NOT NULL
        AND r.status IN ('queued', 'running', 'suspended')
    UNION ALL
    SELECT r.id, r.deadline_at, r.parent_run_id FROM @schema@.runs r
    WHERE r.status IN ('paused', 'needs_attention') AND r.deadline_at <= $1
) d
WHERE NOT EXISTS (SELECT 1 FROM @schema@.runs p WHERE p.id = d.parent_run_id
                  AND p.deadline_at <= $1
                  AND p.status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))
ORDER BY d.deadline_at LIMIT $2

-- name: next_deadline
-- The earliest deadline of a live run, read as due_deadlines reads them.
SELECT least(
    (SELECT min(deadline_at) FROM @schema@.runs
     WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended')),
    (SELECT min(deadline_at) FROM @schema@.runs
     WHERE status IN ('paused', 'needs_attention') AND deadline_at IS NOT NULL))

-- name: reopen_run
SELECT r FROM @schema@.reopen_run($1, $2, $3, $4, $5, $6::@schema@.op[], $7) r

-- name: reopen_runs
-- reopen_run for many runs in one transaction: a row per run, in the order given.
SELECT pos, reopened FROM @schema@.reopen_runs($1, $2, $3, $4, $5, $6, $7::@schema@.op[], $8)
ORDER BY pos

-- name: send_event
-- The event is stored (unless its de-duplication key was taken), and the answer says
-- whether it was and the run waits for it right now.
SELECT stored AND EXISTS (SELECT 1 FROM @schema@.steps s WHERE s.run_id = $1
               AND s.kind = 'event' AND s.status = 'scheduled' AND s.input ->> 'event' = $2)
FROM @schema@.send_event($1, $2, $3, $4, $5) AS stored

-- == queues ==================================================================================

-- name: admit_runs
SELECT id FROM @schema@.admit_runs($1, $2, $3, $4, $5::text[], $6::integer[],
    $7::integer[], $8::integer[], $9::float8[], $10, $11::text[], $12::boolean, $13::text[],
    $14::text, $15::bigint[], $16::text[], $17::text[], $18::bigint[], $19::text[],
    $20::text[]) AS id

-- name: next_queued
SELECT min(wake_at) FROM @schema@.runs WHERE status = 'queued'

-- name: claim_queue_jobs
-- The jobs claimed, oldest first. Their steps and runs are read by claimed_steps, in a
-- statement of its own: one joined here would see them with this statement's snapshot,
-- older than the function's (see there).
SELECT c.run_id, c.step_key, c.function, c.deliveries
FROM @schema@.claim_queue_jobs($1, $2, $3, $4, $5::text[], $6::integer[], $7::integer[],
    $8::float8[], $9::text[], $10::text[], $11::text[], $12::text[]) c
ORDER BY c.available_at

-- name: claimed_steps
-- The jobs a claim_queue_jobs took ($1 run ids, $2 step keys, $3 functions, $4 deliveries),
-- in that order, each with its step's row and its run's workflow, trace and queue. That claim's
-- function reads with snapshots of its own, taken after the lock it waits for: a job (and
-- its step) committed meanwhile is claimed, while the calling statement's older snapshot
-- sees the step as it was before (or none).
SELECT g.run_id, g.step_key, g.function, g.deliveries, s, r.workflow, r.trace, r.queue
FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[]) WITH ORDINALITY
        AS g(run_id, step_key, function, deliveries, n)
    LEFT JOIN @schema@.steps s ON s.run_id = g.run_id AND s.key = g.step_key
    LEFT JOIN @schema@.runs r ON r.id = g.run_id
ORDER BY g.n

-- name: queue_depths
SELECT queue, count(*) FILTER (WHERE status = 'queued'),
    count(*) FILTER (WHERE status IN ('running', 'suspended', 'paused'))
FROM @schema@.runs
WHERE status = 'queued'
    OR (queue IS NOT NULL AND status IN ('running', 'suspended', 'paused'))
GROUP BY queue ORDER BY queue

-- name: queue_keys
-- Per key of queue $1 with live runs: waiting, holding a slot, and how far ahead of the
-- queue's clock a fair queue has served it.
SELECT r.queue_key, count(*) FILTER (WHERE r.status = 'queued'),
    count(*) FILTER (WHERE r.status IN ('running', 'suspended', 'paused')),
    (SELECT t.finish - coalesce(c.clock, 0) FROM @schema@.queue_turns t
     LEFT JOIN @schema@.queue_clocks c ON c.queue = t.queue
     WHERE t.queue = $1 AND t.queue_key = coalesce(r.queue_key, ''))
FROM @schema@.runs r
WHERE r.queue = $1 AND r.status IN ('queued', 'running', 'suspended', 'paused')
GROUP BY r.queue_key ORDER BY r.queue_key

-- == brakes and workers =====================================================================

-- name: put_brake
-- Pause a workflow or a queue; pausing one that is paused changes nothing.
INSERT INTO @schema@.brakes (kind, name, paused_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING

-- name: delete_brake
DELETE FROM @schema@.brakes WHERE kind = $1 AND name = $2

-- name: list_brakes
SELECT kind, name, paused_at FROM @schema@.brakes ORDER BY kind, name

-- name: park_braked
-- Runs $2 (running) of a paused workflow or queue that no live lease holds stop as $1:
-- no pass is theirs now, and none starts until they are resumed. A lease run out is
-- cleared, so a stalled holder's next write is refused.
UPDATE @schema@.runs r SET status = $1, lease_owner = NULL, lease_until = NULL,
    wake_at = NULL, updated_at = $3
WHERE r.status = $2 AND (r.lease_owner IS NULL OR r.lease_until < $3)
    AND EXISTS (SELECT 1 FROM @schema@.brakes b
                WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                    OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default')))
RETURNING r.id

-- name: release_unbraked
-- Paused runs ($2) no brake holds any more go on as $1, due at once: their next pass
-- replays what they did and starts the step they stopped before.
UPDATE @schema@.runs r SET status = $1, wake_at = $3, wakeups = r.wakeups + 1,
    idle_sweeps = 0, updated_at = $3
WHERE r.status = $2
    AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default')))
RETURNING r.id

-- name: put_worker
-- A worker records itself as it starts, and again with each heartbeat (seen_at).
INSERT INTO @schema@.workers (id, host, pid, app, version, queues, workflows, started_at,
    seen_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, workflows = excluded.workflows,
    queues = excluded.queues

-- name: list_workers
SELECT id, host, pid, app, version, queues, workflows, started_at, seen_at
FROM @schema@.workers WHERE seen_at >= $1 ORDER BY started_at, id

-- name: forget_workers
DELETE FROM @schema@.workers WHERE seen_at < $1


-- == schedules ===============================================================================

-- name: put_schedule
-- Insert, or replace what changed in the definition (status and last run are kept); a
-- row comes back only if something was written.
INSERT INTO @schema@.schedules (name, workflow, definition, status, source, owner, next_tick,
    created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow,
    definition = excluded.definition, source = excluded.source, owner = excluded.owner,
    next_tick = excluded.next_tick, updated_at = excluded.updated_at
WHERE schedules.definition::text IS DISTINCT FROM excluded.definition::text
    OR schedules.owner IS DISTINCT FROM excluded.owner
RETURNING name

-- name: put_schedule_as_read
SELECT @schema@.put_schedule_as_read($1, $2, $3::json, $4, $5, $6, $7, $8, $9, $10)

-- name: get_schedules
SELECT s.*, r.status AS last_run_status
FROM @schema@.schedules s LEFT JOIN @schema@.runs r ON r.id = s.last_run_id
WHERE $1::text IS NULL OR s.name = $1
ORDER BY s.name

-- name: due_schedules
SELECT s.*, NULL::text AS last_run_status FROM @schema@.schedules s
WHERE s.status = 'active' AND s.next_tick <= $1
ORDER BY s.next_tick LIMIT $2

-- name: next_schedule_tick
SELECT min(next_tick) FROM @schema@.schedules WHERE status = 'active'

-- name: fire_schedule
SELECT @schema@.fire_schedule($1, $2, $3, $4::@schema@.new_run[], $5, $6)

-- name: set_schedule_status
WITH moved AS (
    UPDATE @schema@.schedules SET status = $2, next_tick = $3, updated_at = $4
    WHERE name = $1 RETURNING *
)
SELECT m.*, r.status AS last_run_status
FROM moved m LEFT JOIN @schema@.runs r ON r.id = m.last_run_id

-- name: delete_schedule
DELETE FROM @schema@.schedules WHERE name = $1 RETURNING name

-- name: count_timers
SELECT count(*) FROM @schema@.timers WHERE run_id = $1

-- name: put_version
-- A version registered again keeps its definition and who registered it; only its status
-- moves.
INSERT INTO @schema@.workflow_versions (workflow, version, kind, definition, status,
    created_at, updated_at, registered_by)
VALUES ($1, $2, $3, $4, $5, $6, $6, $7)
ON CONFLICT (workflow, version) DO UPDATE SET status = excluded.status,
    updated_at = excluded.updated_at

-- name: claim_graph
-- A name's first registration claims it. ON CONFLICT waits for a racing claim to commit,
-- so the SELECT after it (a statement of its own, with a fresh snapshot) sees the winner.
INSERT INTO @schema@.graph_owners (workflow, owner, created_at) VALUES ($1, $2, $3)
ON CONFLICT (workflow) DO NOTHING

-- name: graph_owner
SELECT owner FROM @schema@.graph_owners WHERE workflow = $1

-- name: list_versions
SELECT workflow, version, kind, definition, status, created_at, updated_at, registered_by
FROM @schema@.workflow_versions
WHERE ($1::text IS NULL OR workflow = $1) AND ($2::text IS NULL OR version = $2)
    AND ($3::text IS NULL OR status = $3)
ORDER BY updated_at DESC, version

-- == approvals, values, forks, retention ===================================================

-- name: submit_decision
SELECT @schema@.submit_decision($1, $2, $3, $4, $5, $6, $7, $8::@schema@.op[], $9, $10, $11, $12)

-- name: get_decisions
SELECT id, name, payload, decided_by, created_at AS decided_at, outcome, reason, judged_at,
    consumed_by AS key
FROM @schema@.events WHERE run_id = $1 AND outcome IS NOT NULL ORDER BY id

-- name: list_gates
-- Gates of live runs; a NULL status matches every gate.
SELECT s, r.workflow, r.owner, r.status AS run_status
FROM @schema@.steps s JOIN @schema@.runs r ON r.id = s.run_id
WHERE s.kind = 'approval' AND ($1::text IS NULL OR s.status = $1)
    AND r.status IN ('running', 'suspended', 'paused', 'needs_attention')
ORDER BY s.created_at LIMIT $2

-- name: get_values
SELECT key, value FROM @schema@.run_values WHERE run_id = $1 ORDER BY key

-- name: run_marks
-- What changes when anything a run's page shows changes, read without its values: an
-- event stream reads this every tick and the run itself only when it moved.
SELECT r.status, r.updated_at,
    (SELECT count(*) FROM @schema@.steps WHERE run_id = r.id),
    (SELECT max(updated_at) FROM @schema@.steps WHERE run_id = r.id),
    (SELECT count(*) FROM @schema@.run_values WHERE run_id = r.id),
    (SELECT max(updated_at) FROM @schema@.run_values WHERE run_id = r.id),
    (SELECT count(*) FROM @schema@.events WHERE run_id = r.id AND outcome IS NOT NULL),
    (SELECT max(coalesce(judged_at, created_at)) FROM @schema@.events
     WHERE run_id = r.id AND outcome IS NOT NULL),
    (SELECT count(*) FROM @schema@.runs WHERE parent_run_id = r.id),
    (SELECT max(updated_at) FROM @schema@.runs WHERE parent_run_id = r.id),
    (SELECT count(*) FROM @schema@.stream_entries WHERE run_id = r.id AND "offset" = 0)
FROM @schema@.runs r WHERE r.id = $1

-- name: fork_run
SELECT forked, moved
FROM @schema@.fork_run($1::@schema@.new_run, $2, $3::@schema@.op[], $4, $5::text[],
                       $6::@schema@.op)

-- name: prune_runs
SELECT deleted, last_at, last_id FROM @schema@.prune_runs($1::text[], $2, $3, $4, $5)

-- == wake-ups ================================================================================

-- name: notify
SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload

-- name: keepalive
-- The LISTEN connection's probe of a server that may have vanished without a word.
SELECT 1

-- == requests ================================================================================

-- name: send_request
SELECT @schema@.send_request($1, $2, $3, $4, $5, $6, $7::text[], $8)

-- name: get_request
SELECT id, run_id, name, data, status, taken_by, reply, refusal, created_at, deadline
FROM @schema@.requests WHERE id = $1

-- name: withdraw_request
UPDATE @schema@.requests SET status = $3, answered_at = $4
WHERE id = $1 AND status = $2
RETURNING id

-- == streams =================================================================================

-- name: append_stream
SELECT @schema@.append_stream($1, $2::text[], $3::text[], $4::text[], $5::integer[],
                              $6::text[], $7)

-- name: read_stream
SELECT "offset", kind, value, step_key, attempt, at FROM @schema@.stream_entries
WHERE run_id = $1 AND stream = $2 AND "offset" > $3 ORDER BY "offset" LIMIT $4

-- name: read_stream_settled
-- Without resets, and without the entries of attempts that did not succeed ($5: the
-- status of a step whose latest attempt succeeded).
SELECT e."offset", e.kind, e.value, e.step_key, e.attempt, e.at
FROM @schema@.stream_entries AS e
WHERE e.run_id = $1 AND e.stream = $2 AND e."offset" > $3 AND e.kind <> 'reset'
    AND (e.step_key IS NULL OR EXISTS (
        SELECT 1 FROM @schema@.steps AS s
        WHERE s.run_id = e.run_id AND s.key = e.step_key AND s.attempts = e.attempt
            AND s.status = $5))
ORDER BY e."offset" LIMIT $4

-- name: stream_names
SELECT DISTINCT stream FROM @schema@.stream_entries WHERE run_id = $1 ORDER BY stream

-- == stored queue limits and spend ==========================================================

-- name: put_queue_limits
-- A queue's limits as an app declares them, replacing what was stored for the queue.
INSERT INTO @schema@.queue_limits (name, concurrency, per_key, rate, rate_window, budget,
    budget_per_key, fair, app, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
    per_key = excluded.per_key, rate = excluded.rate, rate_window = excluded.rate_window,
    budget = excluded.budget, budget_per_key = excluded.budget_per_key, fair = excluded.fair,
    app = excluded.app,
    updated_at = excluded.updated_at

-- name: list_queue_limits
SELECT name, concurrency, per_key, rate, rate_window, budget, budget_per_key, fair, app,
    updated_at
FROM @schema@.queue_limits ORDER BY name

-- name: insert_spend
-- Spend of run $5[i]'s step attempt, counted against queue $1[i] (NULL: the run's queue)
-- with the run's key; spend of a step in no queue is not kept.
INSERT INTO @schema@.spend (queue, queue_key, unit, amount, at, run_id, step_key, attempt)
SELECT coalesce(s.queue, r.queue), r.queue_key, s.unit, s.amount, s.at, s.run_id,
    s.step_key, s.attempt
FROM unnest($1::text[], $2::text[], $3::float8[], $4::timestamptz[], $5::text[], $6::text[],
    $7::integer[]) AS s(queue, unit, amount, at, run_id, step_key, attempt)
JOIN @schema@.runs r ON r.id = s.run_id
WHERE coalesce(s.queue, r.queue) IS NOT NULL

-- name: spend_totals
-- The spend of each (queue $1[i], unit $2[i]) since $3[i], per key where $4[i], with the
-- oldest entry counted.
WITH conf AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::boolean[])
        AS c(queue, unit, since, per_key)
)
SELECT s.queue, CASE WHEN c.per_key THEN s.queue_key END AS key, s.unit, sum(s.amount),
    min(s.at)
FROM @schema@.spend s JOIN conf c ON c.queue = s.queue AND c.unit = s.unit
WHERE s.at > c.since
GROUP BY s.queue, CASE WHEN c.per_key THEN s.queue_key END, s.unit
ORDER BY 1, 2, 3

-- name: prune_spend
DELETE FROM @schema@.spend WHERE queue = $1 AND at <= $2

-- name: queue_key_depths
-- Per queue and key: live runs waiting (queued) and holding a slot.
SELECT queue, queue_key, count(*) FILTER (WHERE status = 'queued'),
    count(*) FILTER (WHERE status IN ('running', 'suspended', 'paused'))
FROM @schema@.runs
WHERE queue IS NOT NULL AND queue_key IS NOT NULL
    AND status IN ('queued', 'running', 'suspended', 'paused')
GROUP BY queue, queue_key ORDER BY queue, queue_key

-- == runs started in the caller's transaction ==============================================

-- name: where_am_i
-- Which database a connection is on: its name, the server's start time (one per server)
-- and this schema's oid there (NULL: no such schema); a caller's connection must be on
-- the store's.
SELECT current_database(), pg_postmaster_start_time()::text,
    to_regnamespace('@schema@')::oid::bigint

-- name: create_run_json
-- create_run on a caller's connection: the run as JSON, the time as unix seconds (the
-- connection has none of the store's codecs); only the id and workflow come back.
SELECT c.created, (c.run).id, (c.run).workflow
FROM @schema@.create_run(json_populate_record(NULL::@schema@.new_run, $1::json),
    to_timestamp($2::float8)) AS c
