-- The statements of the SQLite store (store/sqlite/). Each block starts with
-- "-- name: <name>". Times are unix seconds (REAL); JSON is TEXT. Parameters are "?" in
-- the order the store passes them, or ":name" where a statement uses a value twice. A list
-- of values is one JSON array parameter, read with json_each, so a statement's text never
-- depends on how many values it gets.
--
-- Column order: runs in plait.store.rows.RunRow's field order, steps in StepRow's
-- (convert.step_params), attempts in convert.attempt_record's.

-- == connections and transactions ===========================================================

-- name: foreign_keys_off
PRAGMA foreign_keys = OFF

-- name: synchronous_off
PRAGMA synchronous = OFF

-- name: synchronous_normal
PRAGMA synchronous = NORMAL

-- name: synchronous_full
PRAGMA synchronous = FULL

-- name: synchronous_extra
PRAGMA synchronous = EXTRA

-- name: journal_mode_wal
PRAGMA journal_mode = WAL

-- name: busy_timeout_off
-- The writer waits for another process's write lock in its own loop, never inside SQLite.
PRAGMA busy_timeout = 0

-- name: wal_autocheckpoint_off
-- The write connection never copies the log back into the file inside a commit: that
-- copy and its sync would run wherever the commit runs, the event loop's thread included.
-- The writer thread does it instead, between two transactions.
PRAGMA wal_autocheckpoint = 0

-- name: wal_checkpoint
-- Copies what it can of the log into the file without waiting for any reader or writer;
-- returns (busy, frames in the log, frames copied).
PRAGMA wal_checkpoint(PASSIVE)

-- name: data_version
-- Changes whenever another connection commits to the file.
PRAGMA data_version

-- name: begin
BEGIN

-- name: begin_immediate
BEGIN IMMEDIATE

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- == the schema's version ====================================================================

-- name: create_schema_table
CREATE TABLE IF NOT EXISTS plait_schema (id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL)

-- name: schema_version
SELECT version FROM plait_schema

-- name: set_schema_version
INSERT INTO plait_schema (id, version) VALUES (1, ?)
ON CONFLICT (id) DO UPDATE SET version = excluded.version

-- == runs ====================================================================================

-- name: insert_run
-- A run, unless its id (or its de-duplication key, among live runs) is taken.
INSERT INTO plait_runs (id, workflow, kind, version, status, input, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, trace,
    deadline_at, timeout, tags, debounce_key, debounce_until)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: debounce_run
-- A debounced start joins the run of its workflow, key and owner that still waits for its
-- start time: that run takes the start's input and starts at :start (never past its
-- debounce_until), its deadline moved with its start.
UPDATE plait_runs SET input = :input, updated_at = :now,
    wake_at = min(:start, coalesce(debounce_until, :start)),
    deadline_at = CASE WHEN timeout IS NULL THEN deadline_at
                       ELSE min(:start, coalesce(debounce_until, :start)) + timeout END
WHERE workflow = :workflow AND debounce_key = :key AND coalesce(owner, '') = :owner
    AND status = 'queued' AND wake_at > :now
RETURNING id

-- name: close_debounce
-- The run of a debounce key whose start time has passed (it waits for its queue) leaves
-- the window: the next start of the key makes a new run.
UPDATE plait_runs SET debounce_key = NULL
WHERE workflow = :workflow AND debounce_key = :key AND coalesce(owner, '') = :owner
    AND status = 'queued' AND wake_at <= :now

-- name: run_tags
SELECT tags FROM plait_runs WHERE id = ?

-- name: put_run_tags
-- A run's tags (a JSON object) merged into its row and its plait_run_tags rows.
UPDATE plait_runs SET tags = json_patch(coalesce(tags, '{}'), :tags) WHERE id = :run

-- name: put_run_tag_rows
INSERT INTO plait_run_tags (run_id, key, value, run_created_at)
SELECT :run, key, value, (SELECT created_at FROM plait_runs WHERE id = :run)
FROM json_each(:tags) WHERE true
ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value

-- name: live_dedup_run
SELECT id FROM plait_runs
WHERE dedup = ? AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention')

-- name: select_run
SELECT id, workflow, kind, version, status, input, output, error, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, admitted_at,
    forked_from, trace, continued_from, continued_to, deadline_at,
    timeout, tags
FROM plait_runs WHERE id = ?

-- name: run_statuses
-- The runs that exist among many, with their status (for the end-watch poll).
SELECT id, status FROM plait_runs WHERE id IN (SELECT value FROM json_each(?))

-- name: run_status
SELECT status FROM plait_runs WHERE id = ?

-- name: run_filters
-- The condition of each filter of store.rows.RunFilter (tags aside: runs.listing adds one
-- tag_filter per pair). The listing statements below hold
-- only the conditions of the filters given (in place of /*filters*/): SQLite's planner
-- cannot use an index for a term like (:x IS NULL OR column = :x), and would walk every
-- run newest first to fill a page. visible_schedule_runs adds to visible_to the runs of
-- schedules without an owner (owner 'schedule:<name>', plait.ids.schedule_owner).
visible_to: (owner IS NULL OR owner = :visible_to OR (:visible_schedule_runs AND substr(owner, 1, 9) = 'schedule:'))
workflow: workflow = :workflow
status: status = :status
version: version = :version
owner: owner = :owner
parent_run_id: parent_run_id = :parent_run_id
id_contains: instr(lower(id), lower(:id_contains)) > 0
created_after: created_at >= :created_after
created_before: created_at < :created_before
top_level: parent_run_id IS NULL
hide_continued: continued_to IS NULL
queue: queue = :queue

-- name: tag_filter
-- The condition of the Nth pair of RunFilter.tags (N filled in by runs.listing): the run
-- carries it, found through plait_run_tags' (key, value, run_id) index.
id IN (SELECT run_id FROM plait_run_tags WHERE key = :tag_key_N AND value = :tag_value_N)

-- name: count_runs
-- The filters given go in place of /*filters*/ (run_filters).
SELECT count(*) FROM plait_runs
WHERE /*filters*/ 1

-- name: count_by_status
-- How many runs match in each status: the filters given go in place of /*filters*/
-- (run_filters), the status filter left out by the caller.
SELECT status, count(*) FROM plait_runs
WHERE /*filters*/ 1
GROUP BY status

-- name: list_runs
SELECT id, workflow, kind, version, status, input, output, error, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, admitted_at,
    forked_from, trace, continued_from, continued_to, deadline_at,
    timeout, tags
FROM plait_runs
WHERE /*filters*/ 1
ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset

-- name: list_run_summaries
-- As list_runs, without the JSON columns (convert.run_summary's column order), with how
-- many children of each run the caller may see.
SELECT id, workflow, kind, status, version, owner, parent_run_id, created_at, updated_at,
    queue, queue_key, priority, scheduled_at, admitted_at, wake_at,
    (SELECT count(*) FROM plait_runs c WHERE c.parent_run_id = plait_runs.id
        AND (:visible_to IS NULL OR c.owner IS NULL OR c.owner = :visible_to
            OR (:visible_schedule_runs AND substr(c.owner, 1, 9) = 'schedule:'))) AS children,
    tags
FROM plait_runs
WHERE /*filters*/ 1
ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset

-- name: list_runs_tagged
-- As list_runs, of the runs that carry tag pair 0 (and the others, each a tag_filter in
-- /*filters*/): read from plait_run_tags' index in the list's order, so a page costs
-- the same however many runs carry the tag.
SELECT id, workflow, kind, version, status, input, output, error, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, admitted_at,
    forked_from, trace, continued_from, continued_to, deadline_at,
    timeout, tags
FROM plait_run_tags t JOIN plait_runs ON plait_runs.id = t.run_id
WHERE t.key = :tag_key_0 AND t.value = :tag_value_0 AND /*filters*/ 1
ORDER BY t.run_created_at DESC, t.run_id DESC LIMIT :limit OFFSET :offset

-- name: list_run_summaries_tagged
-- As list_run_summaries, of the runs that carry tag pair 0 (and the others, each a tag_filter in
-- /*filters*/): read from plait_run_tags' index in the list's order, so a page costs
-- the same however many runs carry the tag.
SELECT id, workflow, kind, status, version, owner, parent_run_id, created_at, updated_at,
    queue, queue_key, priority, scheduled_at, admitted_at, wake_at,
    (SELECT count(*) FROM plait_runs c WHERE c.parent_run_id = plait_runs.id
        AND (:visible_to IS NULL OR c.owner IS NULL OR c.owner = :visible_to
            OR (:visible_schedule_runs AND substr(c.owner, 1, 9) = 'schedule:'))) AS children,
    tags
FROM plait_run_tags t JOIN plait_runs ON plait_runs.id = t.run_id
WHERE t.key = :tag_key_0 AND t.value = :tag_value_0 AND /*filters*/ 1
ORDER BY t.run_created_at DESC, t.run_id DESC LIMIT :limit OFFSET :offset

-- name: get_children
-- The newest children of a run (parent_run_id has its own index, which the filters of
-- list_runs cannot use).
SELECT id, workflow, kind, version, status, input, output, error, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, admitted_at,
    forked_from, trace, continued_from, continued_to, deadline_at,
    timeout, tags
FROM plait_runs WHERE parent_run_id = ?
ORDER BY created_at DESC, id DESC LIMIT ?

-- name: wake_run
-- Due at once (or at the given time, if earlier than its current wake-up); the count of
-- wake-ups tells a pass in flight that it must look again.
UPDATE plait_runs SET wakeups = wakeups + 1, updated_at = ?, idle_sweeps = 0,
    wake_at = CASE WHEN wake_at IS NULL OR wake_at > ? THEN ? ELSE wake_at END
WHERE id = ? AND status = 'running'

-- name: end_run
-- The end of a running run; RETURNING tells whether it moved and whose step it settles.
UPDATE plait_runs SET status = ?, output = ?, error = ?, updated_at = ?, wake_at = NULL
WHERE id = ? AND status = 'running'
RETURNING parent_run_id, parent_step_key

-- name: end_live_run
-- The same from running, suspended or queued (a cancel, and its cascade to children).
UPDATE plait_runs SET status = ?, output = ?, error = ?, updated_at = ?, wake_at = NULL
WHERE id = ? AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention')
RETURNING parent_run_id, parent_step_key

-- name: delete_run_timers
DELETE FROM plait_timers WHERE run_id = ?

-- name: delete_run_jobs
DELETE FROM plait_jobs WHERE run_id = ?

-- name: close_open_attempts
-- A cancelled run's attempts still open (their worker died, or has yet to notice): no
-- pass replays an ended run, so each ends here as steps.interrupt ends one that its pass
-- saw cancelled, with the cancel's error, as the cancel's cut says: the step takes
-- :step, an attempt that is :open takes :attempt. A step running with no attempt open (a
-- for_each node waiting for its items) takes :step too.
UPDATE plait_steps SET status = :step, error = :error,
    attempt_status = CASE WHEN attempt_status = :open THEN :attempt ELSE attempt_status END,
    attempt_error = CASE WHEN attempt_status = :open THEN :error ELSE attempt_error END,
    attempt_finished = CASE WHEN attempt_status = :open THEN :now ELSE attempt_finished END,
    updated_at = :now
WHERE run_id = :run AND (attempt_status = :open OR status = 'running')

-- name: link_continued
-- A run that continued as new (end_run moved it) and its successor, linked both ways.
UPDATE plait_runs SET
    continued_to = CASE WHEN id = :old THEN :new ELSE continued_to END,
    continued_from = CASE WHEN id = :new THEN :old ELSE continued_from END
WHERE id IN (:old, :new)

-- name: hand_over_schedule_run
-- A schedule whose last run continued as new has its successor as its last run: the chain
-- is one run of the schedule, and a prune may delete its ended links while it lives.
UPDATE plait_schedules SET last_run_id = :new WHERE last_run_id = :old

-- name: hand_over_child_step
-- The parent's step that waited for a child run that continued as new waits for the
-- child's successor.
UPDATE plait_steps SET child_run_id = :new
WHERE run_id = :parent AND key = :key AND child_run_id = :old

-- name: carry_held_events
-- The events a run that continued as new had accepted and not taken yet wait for its
-- successor, in the order they came (their ids). Decisions held for approval gates
-- (decided_by) stay with the run they were sent to.
UPDATE plait_events SET run_id = :new
WHERE run_id = :old AND consumed_by IS NULL AND decided_by IS NULL

-- name: run_deadline
-- A run's status and deadline, for its time-out.
SELECT status, deadline_at FROM plait_runs WHERE id = ?

-- name: due_deadlines
-- Live runs past their deadline (with it), soonest first: the queued, running and
-- suspended ones through the deadline index, the paused and parked ones (few, and outside
-- that index) through the status index. A child whose live parent is past its own deadline
-- too is left to the parent's time-out, which cancels it.
SELECT d.id, d.deadline_at FROM (
    SELECT r.id, r.deadline_at, r.parent_run_id FROM plait_runs r INDEXED BY plait_runs_deadline
    WHERE r.deadline_at <= :now AND r.deadline_at IS NOT NULL
        AND r.status IN ('queued', 'running', 'suspended')
    UNION ALL
    SELECT r.id, r.deadline_at, r.parent_run_id FROM plait_runs r INDEXED BY plait_runs_status
    WHERE r.status IN ('paused', 'needs_attention') AND r.deadline_at <= :now
) d
WHERE NOT EXISTS (SELECT 1 FROM plait_runs p WHERE p.id = d.parent_run_id
                  AND p.deadline_at <= :now
                  AND p.status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))
ORDER BY d.deadline_at LIMIT :limit

-- name: next_deadline
-- The earliest deadline of a live run, read as due_deadlines reads them.
SELECT min(at) FROM (
    SELECT min(deadline_at) AS at FROM plait_runs INDEXED BY plait_runs_deadline
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'suspended')
    UNION ALL
    SELECT min(deadline_at) FROM plait_runs INDEXED BY plait_runs_status
    WHERE status IN ('paused', 'needs_attention') AND deadline_at IS NOT NULL
)

-- name: live_children
SELECT id FROM plait_runs WHERE parent_run_id = ? AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention')

-- name: live_child_of_step
-- The live child run that a run's step waits for (one its workflow cancelled).
SELECT id FROM plait_runs WHERE parent_run_id = ? AND parent_step_key = ?
    AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention')

-- name: insert_event
-- An event for a run that has not ended, unless the run took one of the same
-- de-duplication key already (the unique index's conflict: nothing is stored).
INSERT INTO plait_events (run_id, name, payload, created_at, dedup)
SELECT :run, :name, :payload, :now, :dedup
WHERE EXISTS (SELECT 1 FROM plait_runs
              WHERE id = :run AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))
ON CONFLICT DO NOTHING

-- name: event_dedup_taken
SELECT EXISTS (SELECT 1 FROM plait_events WHERE run_id = ? AND dedup = ?)

-- name: waits_for_event
SELECT EXISTS (SELECT 1 FROM plait_steps WHERE run_id = ? AND kind = 'event'
               AND status = 'scheduled' AND json_extract(input, '$.event') = ?)

-- == steps and attempts ======================================================================

-- name: get_steps
SELECT run_id, key, seq, name, kind, function, status, input, output, error, attempts,
    failures, retries, retry_delay, timeout, invocation_id, child_run_id, branch, from_key,
    queued, wake_at, created_at, updated_at, delivered, retried_failures, reached_after
FROM plait_steps WHERE run_id = ? ORDER BY seq

-- name: waiting_steps
-- The steps of many runs (json list 1) of the kinds in list 2 and the statuses in list 3,
-- in run and step order: what a page of runs waits on, in one read.
SELECT run_id, key, seq, name, kind, function, status, input, output, error, attempts,
    failures, retries, retry_delay, timeout, invocation_id, child_run_id, branch, from_key,
    queued, wake_at, created_at, updated_at, delivered, retried_failures, reached_after
FROM plait_steps WHERE run_id IN (SELECT value FROM json_each(?))
    AND kind IN (SELECT value FROM json_each(?)) AND status IN (SELECT value FROM json_each(?))
ORDER BY run_id, seq

-- name: get_history
-- Earlier attempts from plait_attempts, the latest of each step from its step row; oldest
-- first, attempts that started at one instant (a clock that stands still) in step order.
SELECT run_id, key, attempt, status, output, error, started_at, finished_at, worker FROM (
    SELECT a.run_id, a.key, a.attempt, a.status, a.output, a.error, a.started_at,
        a.finished_at, a.worker, s.seq
    FROM plait_attempts a JOIN plait_steps s ON s.run_id = a.run_id AND s.key = a.key
    WHERE a.run_id = ?
    UNION ALL
    SELECT run_id, key, attempts, attempt_status,
        CASE WHEN attempt_status = 'succeeded' THEN output END, attempt_error,
        attempt_started, attempt_finished, worker, seq
    FROM plait_steps WHERE run_id = ? AND attempt_status IS NOT NULL
)
ORDER BY started_at, seq, attempt

-- name: archive_attempt
-- The attempt on a step row moves to plait_attempts when the next one starts.
INSERT INTO plait_attempts (run_id, key, attempt, status, output, error, worker, started_at,
    finished_at)
SELECT run_id, key, ?, attempt_status,
    CASE WHEN attempt_status = 'succeeded' THEN output END, attempt_error, worker,
    attempt_started, attempt_finished
FROM plait_steps WHERE run_id = ? AND key = ? AND attempt_status IS NOT NULL
ON CONFLICT (run_id, key, attempt) DO UPDATE SET status = excluded.status,
    output = excluded.output, error = excluded.error, worker = excluded.worker,
    started_at = excluded.started_at, finished_at = excluded.finished_at

-- name: upsert_step
-- Writing a step row again changes everything but its identity, its first-reach order
-- and what it was reached after.
INSERT INTO plait_steps (run_id, key, seq, name, kind, function, status, input, output,
    error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
    branch, from_key, queued, wake_at, created_at, updated_at, delivered, retried_failures,
    reached_after)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, key) DO UPDATE SET
    kind = excluded.kind, function = excluded.function, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    attempts = excluded.attempts, failures = excluded.failures, retries = excluded.retries,
    retry_delay = excluded.retry_delay, timeout = excluded.timeout,
    child_run_id = excluded.child_run_id, branch = excluded.branch,
    queued = excluded.queued, wake_at = excluded.wake_at, updated_at = excluded.updated_at,
    delivered = excluded.delivered, retried_failures = excluded.retried_failures

-- name: start_step
-- A step's new attempt: the step row, with the attempt on it (its status the op's).
INSERT INTO plait_steps (run_id, key, seq, name, kind, function, status, input, output,
    error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
    branch, from_key, queued, wake_at, created_at, updated_at, delivered, retried_failures,
    reached_after, worker, attempt_status, attempt_error, attempt_started, attempt_finished)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
    NULL, ?, NULL)
ON CONFLICT (run_id, key) DO UPDATE SET
    kind = excluded.kind, function = excluded.function, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    attempts = excluded.attempts, failures = excluded.failures, retries = excluded.retries,
    retry_delay = excluded.retry_delay, timeout = excluded.timeout,
    child_run_id = excluded.child_run_id, branch = excluded.branch,
    queued = excluded.queued, wake_at = excluded.wake_at, updated_at = excluded.updated_at,
    delivered = excluded.delivered, retried_failures = excluded.retried_failures,
    worker = excluded.worker, attempt_status = excluded.attempt_status, attempt_error = NULL,
    attempt_started = excluded.attempt_started, attempt_finished = NULL

-- name: insert_step_start
-- start_step for a row not stored yet, the first attempt of most steps: a plain insert
-- costs SQLite a good part less than the upsert. A row that is there after all fails it,
-- and start_step follows.
INSERT INTO plait_steps (run_id, key, seq, name, kind, function, status, input, output,
    error, attempts, failures, retries, retry_delay, timeout, invocation_id, child_run_id,
    branch, from_key, queued, wake_at, created_at, updated_at, delivered, retried_failures,
    reached_after, worker, attempt_status, attempt_error, attempt_started, attempt_finished)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
    NULL, ?, NULL)

-- name: finish_step
-- An attempt's end: the step columns it changes and the attempt on the row, in one
-- statement (no attempt on the row: the attempt columns stay empty).
UPDATE plait_steps SET status = ?, output = ?, error = ?, attempts = ?, failures = ?,
    wake_at = ?, branch = ?, child_run_id = ?, updated_at = ?, delivered = ?,
    attempt_status = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_error = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_finished = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END
WHERE run_id = ? AND key = ?

-- name: finish_step_succeeded
-- finish_step for an attempt that succeeded: its error stays as its start left it (none),
-- and not naming the column keeps the stream-reset trigger's program from running.
UPDATE plait_steps SET status = ?, output = ?, error = ?, attempts = ?, failures = ?,
    wake_at = ?, branch = ?, child_run_id = ?, updated_at = ?, delivered = ?,
    attempt_status = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_finished = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END
WHERE run_id = ? AND key = ?

-- name: finish_step_succeeded_fenced
-- finish_step_succeeded as the first write of a commit, with the commit's fence in it
-- (run_lease_owner): it writes only while the pass's worker holds the run and the run is
-- running. When it writes nothing, the commit checks its fence with run_lease_owner and
-- writes its ops as usual (a run held in another status that has not ended included):
-- one statement fewer for most steps.
UPDATE plait_steps SET status = ?, output = ?, error = ?, attempts = ?, failures = ?,
    wake_at = ?, branch = ?, child_run_id = ?, updated_at = ?, delivered = ?,
    attempt_status = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_finished = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END
WHERE run_id = ? AND key = ?
    AND EXISTS (SELECT 1 FROM plait_runs AS r
        WHERE r.id = plait_steps.run_id AND r.lease_owner = ? AND r.status = 'running')

-- == timers, jobs, events, state =============================================================

-- name: set_timer
INSERT INTO plait_timers (run_id, step_key, purpose, wake_at) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, step_key) DO UPDATE SET purpose = excluded.purpose,
    wake_at = excluded.wake_at

-- name: clear_timer
DELETE FROM plait_timers WHERE run_id = ? AND step_key = ?

-- name: enqueue_job
INSERT INTO plait_jobs (run_id, step_key, function, available_at, created_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (run_id, step_key) DO UPDATE SET function = excluded.function,
    available_at = excluded.available_at, lease_owner = NULL, lease_until = NULL

-- name: consume_event
UPDATE plait_events SET consumed_by = ? WHERE id = ? AND consumed_by IS NULL

-- name: set_state
INSERT INTO plait_state (run_id, name, value) VALUES (?, ?, ?)
ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value

-- == orchestrator passes =====================================================================

-- name: pass_steps
SELECT run_id, key, seq, name, kind, function, status, input, output, error, attempts,
    failures, retries, retry_delay, timeout, invocation_id, child_run_id, branch, from_key,
    queued, wake_at, created_at, updated_at, delivered, retried_failures, reached_after
FROM plait_steps WHERE run_id = ?

-- name: pass_events
SELECT id, name, payload, created_at FROM plait_events
WHERE run_id = ? AND consumed_by IS NULL ORDER BY id

-- name: pass_requests
SELECT id, run_id, name, data, status, taken_by, reply, refusal, created_at, deadline
FROM plait_requests WHERE run_id = ? AND status = 'sent' ORDER BY id

-- name: pass_state
SELECT name, value FROM plait_state WHERE run_id = ?

-- name: list_pass_runs
-- A page of runs for list_passes (the statuses a JSON list), in id order.
SELECT id, workflow, kind, version, status, input, output, error, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, admitted_at,
    forked_from, trace
FROM plait_runs
WHERE status IN (SELECT value FROM json_each(:statuses)) AND kind = :kind
    AND (:workflow IS NULL OR workflow = :workflow) AND id > :after
ORDER BY id LIMIT :limit

-- name: page_steps
-- pass_steps of the runs of a page (their ids a JSON list).
SELECT run_id, key, seq, name, kind, function, status, input, output, error, attempts,
    failures, retries, retry_delay, timeout, invocation_id, child_run_id, branch, from_key,
    queued, wake_at, created_at, updated_at, delivered, retried_failures, reached_after
FROM plait_steps WHERE run_id IN (SELECT value FROM json_each(?))

-- name: page_events
SELECT run_id, id, name, payload, created_at FROM plait_events
WHERE run_id IN (SELECT value FROM json_each(?)) AND consumed_by IS NULL ORDER BY id

-- name: page_state
SELECT run_id, name, value FROM plait_state WHERE run_id IN (SELECT value FROM json_each(?))

-- name: claim_run
-- Only a run of the claimer's scope (its app's workflows, its queues) whose workflow and
-- queue are not paused (plait_brakes).
UPDATE plait_runs SET lease_owner = :owner, lease_until = :until
WHERE id = :run AND status = 'running' AND (lease_owner IS NULL OR lease_until < :now)
    AND (:scope_workflows IS NULL OR workflow IN (SELECT value FROM json_each(:scope_workflows))
        OR (kind = 'graph' AND :scope_graphs))
    AND (:scope_queues IS NULL OR coalesce(queue, :default_queue) IN (SELECT value FROM json_each(:scope_queues)))
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))

-- name: claim_due_runs
-- The index is named: without statistics the planner would rather walk every running
-- run by status and sort them (tests/store/test_sqlite_plans.py).
-- Only runs of the claimer's scope whose workflow and queue are not paused.
UPDATE plait_runs SET lease_owner = :owner, lease_until = :until
WHERE id IN (
    SELECT id FROM plait_runs INDEXED BY plait_runs_due
    WHERE wake_at <= :now AND status = 'running' AND (lease_owner IS NULL OR lease_until < :now)
    AND (:scope_workflows IS NULL OR workflow IN (SELECT value FROM json_each(:scope_workflows))
        OR (kind = 'graph' AND :scope_graphs))
    AND (:scope_queues IS NULL OR coalesce(queue, :default_queue) IN (SELECT value FROM json_each(:scope_queues)))
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))
    ORDER BY wake_at LIMIT :limit
)
RETURNING id

-- name: run_lease_owner
-- The fence of a pass's batch: it writes only while its worker still holds the run, and
-- starts nothing new once the run has ended (a cancel from another process).
SELECT lease_owner, status FROM plait_runs WHERE id = ?

-- name: release_run
-- Give the run back: due again at once if someone woke it during the pass (its wake-up
-- count moved from the one the pass saw), else when its earliest timer fires.
UPDATE plait_runs SET lease_owner = NULL, lease_until = NULL, wake_at = CASE
    WHEN status != 'running' THEN NULL
    WHEN wakeups != ? THEN ?
    ELSE (SELECT min(wake_at) FROM plait_timers WHERE run_id = plait_runs.id) END
WHERE id = ? AND lease_owner = ?
RETURNING wake_at

-- name: sweep_idle
-- Running runs that nothing will wake (no lease, no wake-up, no timer, no job); each
-- run's sweeps back off: base seconds doubling up to cap.
UPDATE plait_runs SET wake_at = ?, idle_sweeps = idle_sweeps + 1
WHERE id IN (
    SELECT r.id FROM plait_runs r INDEXED BY plait_runs_idle
    WHERE r.status = 'running' AND r.wake_at IS NULL AND r.lease_owner IS NULL
        AND r.updated_at < ? - min(?, ? * (1 << min(r.idle_sweeps, 20)))
        AND NOT EXISTS (SELECT 1 FROM plait_timers t WHERE t.run_id = r.id)
        AND NOT EXISTS (SELECT 1 FROM plait_jobs j WHERE j.run_id = r.id)
    LIMIT ?
)
RETURNING id

-- name: touch_runs
-- ? is a JSON array of run ids.
UPDATE plait_runs SET updated_at = ? WHERE id IN (SELECT value FROM json_each(?))

-- name: leases_of
-- Leases held under a worker id (the prefix "<worker id>#") by other processes than the
-- given owner: an earlier life of a restarted worker, or a twin still draining.
SELECT 'run', id, '', lease_owner, lease_until FROM plait_runs
WHERE substr(lease_owner, 1, ?) = ? AND lease_owner != ?
UNION ALL
SELECT 'job', run_id, step_key, lease_owner, lease_until FROM plait_jobs
WHERE substr(lease_owner, 1, ?) = ? AND lease_owner != ?

-- name: expire_run_lease
UPDATE plait_runs SET lease_until = 0
WHERE id = ? AND lease_owner = ? AND lease_until = ?

-- name: expire_job_lease
UPDATE plait_jobs SET lease_until = 0
WHERE run_id = ? AND step_key = ? AND lease_owner = ? AND lease_until = ?

-- name: release_owned_runs
-- A stopping worker gives back the runs it held among those given (a JSON array of ids):
-- due at once if still running.
UPDATE plait_runs SET lease_owner = NULL, lease_until = NULL,
    wake_at = CASE WHEN status = 'running' THEN ? ELSE NULL END
WHERE lease_owner = ? AND id IN (SELECT value FROM json_each(?))

-- name: release_owned_jobs
UPDATE plait_jobs SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ?

-- name: renew_run_leases
UPDATE plait_runs SET lease_until = ?
WHERE lease_owner = ? AND id IN (SELECT value FROM json_each(?))

-- name: renew_job_leases
UPDATE plait_jobs SET lease_until = ? WHERE lease_owner = ?

-- name: ended_leased_runs
-- Runs this owner holds among those it drives (a JSON array of ids) that ended meanwhile
-- (cancelled from elsewhere), and runs ended among those whose queued steps it is running
-- (another such array).
SELECT id FROM plait_runs WHERE lease_owner = ? AND status != 'running'
    AND id IN (SELECT value FROM json_each(?))
UNION
SELECT id FROM plait_runs WHERE id IN (SELECT value FROM json_each(?))
    AND status IN ('completed', 'failed', 'cancelled', 'continued')

-- name: lost_leased_runs
-- Runs among those this owner drives (a JSON array of ids) whose lease is not its own.
SELECT h.value FROM json_each(?) AS h
WHERE NOT EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = h.value AND r.lease_owner = ?)

-- name: leased_jobs
SELECT run_id, step_key FROM plait_jobs WHERE lease_owner = ?

-- name: next_due_runs
-- When the next pass becomes due (a leased run: when its lease runs out): the earliest
-- unleased wake-up, read off the wake_at index, and the leased runs (a few per worker).
-- Only runs the claimer may claim (claim_due_runs' scope and brakes).
SELECT min(due) FROM (
    SELECT * FROM (
        SELECT wake_at AS due FROM plait_runs INDEXED BY plait_runs_due
        WHERE wake_at IS NOT NULL AND status = 'running' AND lease_owner IS NULL
            AND (:scope_workflows IS NULL OR workflow IN (SELECT value FROM json_each(:scope_workflows))
        OR (kind = 'graph' AND :scope_graphs))
    AND (:scope_queues IS NULL OR coalesce(queue, :default_queue) IN (SELECT value FROM json_each(:scope_queues)))
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))
        ORDER BY wake_at LIMIT 1)
    UNION ALL
    SELECT max(wake_at, lease_until) FROM plait_runs INDEXED BY plait_runs_lease
    WHERE lease_owner IS NOT NULL AND status = 'running' AND wake_at IS NOT NULL
        AND (:scope_workflows IS NULL OR workflow IN (SELECT value FROM json_each(:scope_workflows))
        OR (kind = 'graph' AND :scope_graphs))
    AND (:scope_queues IS NULL OR coalesce(queue, :default_queue) IN (SELECT value FROM json_each(:scope_queues)))
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(queue, 'default')))
)

-- name: next_due_jobs
-- The same for the queued steps of some functions (? is a JSON array of their names).
SELECT min(CASE WHEN lease_owner IS NULL THEN available_at
    ELSE max(available_at, lease_until) END)
FROM plait_jobs
WHERE function IN (SELECT value FROM json_each(?))
    AND EXISTS (SELECT 1 FROM plait_runs r
                WHERE r.id = plait_jobs.run_id AND r.status = 'running'
                    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                        OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))))

-- name: job_depths
-- Jobs a worker could claim now (claim_step_jobs' test), per function: due, of a running
-- run, and held by no live lease. A retry's back-off is not waiting for a worker.
SELECT j.function, count(*) FROM plait_jobs j
WHERE j.available_at <= :now AND (j.lease_owner IS NULL OR j.lease_until < :now)
    AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = j.run_id AND r.status = 'running')
GROUP BY j.function

-- name: pending_work
-- Leases held on running runs and their jobs, the next wake-up of a running run, the
-- next job of some functions (? is a JSON array of their names), the earliest start of a
-- queued run, the next tick of an active schedule and the earliest deadline of a live
-- run: what a virtual clock looks at before it jumps.
SELECT
    (SELECT count(*) FROM plait_runs WHERE lease_owner IS NOT NULL AND status = 'running')
    + (SELECT count(*) FROM plait_jobs j WHERE j.lease_owner IS NOT NULL
       AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = j.run_id AND r.status = 'running')),
    (SELECT min(wake_at) FROM plait_runs WHERE wake_at IS NOT NULL AND status = 'running'),
    (SELECT min(available_at) FROM plait_jobs j
     WHERE j.function IN (SELECT value FROM json_each(?))
         AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = j.run_id AND r.status = 'running')),
    (SELECT min(wake_at) FROM plait_runs WHERE status = 'queued'),
    (SELECT min(next_tick) FROM plait_schedules WHERE status = 'active'),
    (SELECT min(deadline_at) FROM plait_runs WHERE deadline_at IS NOT NULL
     AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))

-- == queued steps ============================================================================

-- name: claim_step_jobs
-- The last ? but two is a JSON array of function names, the last but one a JSON array of
-- [function, queue]: a job of a function whose queue is paused waits, as the runs of a
-- paused queue do.
UPDATE plait_jobs SET lease_owner = ?, lease_until = ?, deliveries = deliveries + 1
WHERE rowid IN (
    SELECT rowid FROM plait_jobs
    WHERE available_at <= ? AND (lease_owner IS NULL OR lease_until < ?)
        AND function IN (SELECT value FROM json_each(?))
        AND EXISTS (SELECT 1 FROM plait_runs r
                    WHERE r.id = plait_jobs.run_id AND r.status = 'running'
                        AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                        OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))))
        AND NOT EXISTS (SELECT 1 FROM json_each(?) AS q JOIN plait_brakes b
                        ON b.kind = 'queue' AND b.name = json_extract(q.value, '$[1]')
                        WHERE json_extract(q.value, '$[0]') = plait_jobs.function)
    ORDER BY available_at LIMIT ?
)
RETURNING run_id, step_key, function, deliveries

-- name: job_held
SELECT 1 FROM plait_jobs WHERE run_id = ? AND step_key = ? AND lease_owner = ?

-- name: unlease_job
UPDATE plait_jobs SET lease_owner = NULL, lease_until = NULL
WHERE run_id = ? AND step_key = ?

-- name: repoint_job
-- A job that named another function than its step goes back under the step's own.
UPDATE plait_jobs SET function = ?, lease_owner = NULL, lease_until = NULL
WHERE run_id = ? AND step_key = ? AND lease_owner = ?

-- name: drop_held_job
-- Only while the job is still the caller's: a job enqueued again since is left alone.
DELETE FROM plait_jobs WHERE run_id = ? AND step_key = ? AND lease_owner = ?

-- name: delete_job
DELETE FROM plait_jobs WHERE run_id = ? AND step_key = ?

-- name: cancel_job_step
-- A job step the workflow cancelled, while it is still in flight (:in_flight, a JSON array
-- of statuses): it takes :step with :error, an attempt that is :open takes :attempt.
UPDATE plait_steps SET status = :step, error = :error, wake_at = NULL, updated_at = :now,
    attempt_status = CASE WHEN attempt_status = :open THEN :attempt ELSE attempt_status END,
    attempt_error = CASE WHEN attempt_status = :open THEN :error ELSE attempt_error END,
    attempt_finished = CASE WHEN attempt_status = :open THEN :now ELSE attempt_finished END
WHERE run_id = :run AND key = :key AND status IN (SELECT value FROM json_each(:in_flight))

-- name: set_delivered
UPDATE plait_steps SET delivered = ? WHERE run_id = ? AND key = ?

-- name: lost_jobs
-- Of the jobs (run id, step key) in the JSON array ?, those ? no longer holds: their run's
-- pass cancelled them, their run ended, or another worker took them.
SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(?) AS j
WHERE NOT EXISTS (SELECT 1 FROM plait_jobs
                  WHERE run_id = json_extract(j.value, '$[0]')
                      AND step_key = json_extract(j.value, '$[1]') AND lease_owner = ?)

-- == workflow versions =======================================================================

-- name: put_version
-- A version registered again keeps its definition and who registered it; only its status
-- moves.
INSERT INTO plait_workflow_versions (workflow, version, kind, definition, status,
    created_at, updated_at, registered_by)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (workflow, version) DO UPDATE SET status = excluded.status,
    updated_at = excluded.updated_at

-- name: list_versions
-- A filter left NULL matches every version.
SELECT workflow, version, kind, definition, status, created_at, updated_at, registered_by
FROM plait_workflow_versions
WHERE (:workflow IS NULL OR workflow = :workflow)
    AND (:version IS NULL OR version = :version)
    AND (:status IS NULL OR status = :status)
ORDER BY updated_at DESC, version

-- name: claim_graph
INSERT INTO plait_graph_owners (workflow, owner, created_at) VALUES (?, ?, ?)
ON CONFLICT (workflow) DO NOTHING

-- name: graph_owner
SELECT owner FROM plait_graph_owners WHERE workflow = ?

-- name: reopen_run
-- A suspended or failed run goes on in the status the runtime gives it (a retried run of
-- a queue waits for admission again), if nothing changed it since the caller read it; a
-- de-duplication key another live run took meanwhile stays with that run. Its deadline is
-- the one the runtime gave it (runs.Reopen.deadline). It is due now, past any debounce
-- window: its debounce key (a run admitted by an older plait kept it) is cleared, so that
-- it never clashes with a run of the key waiting in its window (plait_runs_debounce).
UPDATE plait_runs SET
    status = ?, deadline_at = ?,
    error = NULL, output = NULL, updated_at = ?, wake_at = ?, wakeups = wakeups + 1,
    debounce_key = NULL, debounce_until = NULL,
    dedup = CASE WHEN EXISTS (SELECT 1 FROM plait_runs o
                              WHERE o.dedup = plait_runs.dedup AND o.id != plait_runs.id
                                  AND o.status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))
                 THEN NULL ELSE dedup END
WHERE id = ? AND status = ? AND wakeups = ?

-- name: settle_parent_step
-- A child run ended: the parent's step that waits for it takes the end the runtime
-- decided (status, output, error), and its attempt on the row ends with it.
UPDATE plait_steps SET status = ?, output = ?, error = ?, failures = failures + ?,
    updated_at = ?,
    attempt_status = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_error = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,
    attempt_finished = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END
WHERE run_id = ? AND key = ? AND child_run_id = ? AND status = 'running'

-- name: claimed_step
-- The step a claimed job delivers, and its run's workflow, trace context and queue.
SELECT s.run_id, s.key, s.seq, s.name, s.kind, s.function, s.status, s.input, s.output,
    s.error, s.attempts, s.failures, s.retries, s.retry_delay, s.timeout, s.invocation_id,
    s.child_run_id, s.branch, s.from_key, s.queued, s.wake_at, s.created_at, s.updated_at,
    s.delivered, s.retried_failures, r.workflow, r.trace, r.queue
FROM plait_steps s JOIN plait_runs r ON r.id = s.run_id
WHERE s.run_id = ? AND s.key = ?

-- == queues ===========================================================================

-- name: next_queued
SELECT min(wake_at) FROM plait_runs WHERE status = 'queued'

-- name: admit_runs
-- Admit up to :limit due queued runs, highest priority first, then in start order (the
-- earliest start time, then the row's insertion: the children one pass starts share a
-- start time, and their ids, taken from their steps, are in no order), within the
-- limits in :queues (a JSON array of objects: name, concurrency, per_key, rate, window,
-- turn, costs; a queue not among them has no limits), and lease them. A run holds its
-- queue slot from admission until it ends; per_key applies to runs with a key.
-- A fair queue (turn not null: what one admission costs a key; costs: [key, cost] of the
-- keys whose weights make theirs less) takes its keys in turn within a priority
-- (start-time fair queueing; arrive_turns first gives each key with runs due a turn): a
-- waiting run's turn is its key's finish + its rank within its key times the key's cost
-- (plait_queue_turns), the smallest first; the queue's runs keep the places in the order
-- across queues that its runs in start order would have had. advance_turns,
-- advance_clocks and forget_turns then record the turns taken. A run of a queue held in
-- :held (a JSON array of [queue, key]: key null for the whole queue; a spend budget
-- reached) waits. An admitted run leaves its debounce window (debounce_key and
-- debounce_until cleared): no later start joins it, and a retry that makes it queued again
-- does not hold the key a newer debounced run of it waits with (plait_runs_debounce).
WITH conf AS (
    SELECT json_extract(value, '$.name') AS name,
        json_extract(value, '$.concurrency') AS concurrency,
        json_extract(value, '$.per_key') AS per_key,
        json_extract(value, '$.rate') AS rate,
        json_extract(value, '$.window') AS rate_window,
        json_extract(value, '$.turn') AS turn,
        json_extract(value, '$.costs') AS costs
    FROM json_each(:queues)
), costs AS (
    SELECT c.name AS queue, json_extract(k.value, '$[0]') AS queue_key,
        json_extract(k.value, '$[1]') AS cost
    FROM conf c, json_each(c.costs) k
), active AS (
    SELECT a.queue, count(*) AS n FROM plait_runs a JOIN conf c ON c.name = a.queue
    WHERE a.status IN ('running', 'suspended', 'paused')
    GROUP BY a.queue
), active_keys AS (
    SELECT a.queue, a.queue_key, count(*) AS n FROM plait_runs a
    JOIN conf c ON c.name = a.queue AND c.per_key IS NOT NULL
    WHERE a.status IN ('running', 'suspended', 'paused') AND a.queue_key IS NOT NULL
    GROUP BY a.queue, a.queue_key
), recent AS (
    SELECT q.queue, count(*) AS n FROM plait_queue_admissions q
    JOIN conf c ON c.name = q.queue AND c.rate IS NOT NULL
    WHERE q.at > :now - c.rate_window
    GROUP BY q.queue
), due AS (
    SELECT r.id, r.rowid AS seq, r.queue, r.queue_key, r.priority, r.wake_at, r.created_at,
        c.concurrency, c.per_key, c.rate, c.turn,
        row_number() OVER (PARTITION BY r.queue, r.queue_key
            ORDER BY r.priority DESC, r.wake_at, r.created_at, r.rowid) AS nth_key
    FROM plait_runs r LEFT JOIN conf c ON c.name = r.queue
    WHERE r.status = 'queued' AND r.wake_at <= :now
        AND (:scope_workflows IS NULL OR r.workflow IN (SELECT value FROM json_each(:scope_workflows))
        OR (r.kind = 'graph' AND :scope_graphs))
    AND (:scope_queues IS NULL OR coalesce(r.queue, :default_queue) IN (SELECT value FROM json_each(:scope_queues)))
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default')))
    AND NOT EXISTS (SELECT 1 FROM json_each(:held) h
                    WHERE json_extract(h.value, '$[0]') = r.queue
                        AND (json_extract(h.value, '$[1]') IS NULL
                             OR json_extract(h.value, '$[1]') = r.queue_key))
), turned AS (
    -- a fair queue's run with :limit runs of its key before it cannot be admitted now:
    -- each of those comes before it. Its turn is where its admission would start (its
    -- key's finish, then one cost for each run of the key before it)
    SELECT d.*, t.finish + (d.nth_key - 1) * coalesce(w.cost, d.turn) AS tag
    FROM (SELECT * FROM due WHERE turn IS NULL OR nth_key <= :limit) d
    LEFT JOIN costs w ON w.queue = d.queue AND w.queue_key = d.queue_key
    LEFT JOIN plait_queue_turns t ON d.turn IS NOT NULL AND t.queue = d.queue
        AND t.queue_key = coalesce(d.queue_key, '')
), key_fits AS (
    SELECT d.*, row_number() OVER (PARTITION BY d.queue
            ORDER BY d.priority DESC, d.tag, d.wake_at, d.created_at, d.seq) AS nth
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
            ORDER BY f.tag, f.wake_at, f.created_at, f.seq) AS by_turn,
        row_number() OVER (PARTITION BY f.queue, f.priority
            ORDER BY f.wake_at, f.created_at, f.seq) AS by_start
    FROM fits f WHERE f.turn IS NOT NULL
), placed AS (
    SELECT f.id, f.priority, f.wake_at AS at, f.created_at AS created, f.seq
    FROM fits f WHERE f.turn IS NULL
    UNION ALL
    -- the n-th in turn takes the place of the n-th in start order
    SELECT a.id, a.priority, b.wake_at, b.created_at, b.seq
    FROM ranked a JOIN ranked b ON b.queue = a.queue AND b.priority = a.priority
        AND b.by_start = a.by_turn
), chosen AS (
    SELECT p.id FROM placed p
    ORDER BY p.priority DESC, p.at, p.created, p.seq
    LIMIT :limit
)
UPDATE plait_runs SET status = :status, lease_owner = :owner, lease_until = :until,
    wake_at = :now, admitted_at = :now, updated_at = :now,
    debounce_key = NULL, debounce_until = NULL
WHERE id IN (SELECT id FROM chosen) AND status = 'queued'
RETURNING id, queue, queue_key

-- name: arrive_turns
-- A key of fair queue :queue whose runs are due and that has no turn yet arrives at the
-- queue's clock.
INSERT INTO plait_queue_turns (queue, queue_key, finish)
SELECT k.queue, k.queue_key,
    coalesce((SELECT clock FROM plait_queue_clocks WHERE queue = :queue), 0)
FROM (SELECT DISTINCT r.queue, coalesce(r.queue_key, '') AS queue_key FROM plait_runs r
      WHERE r.status = 'queued' AND r.wake_at <= :now AND r.queue = :queue) k
WHERE NOT EXISTS (SELECT 1 FROM plait_queue_turns t
                  WHERE t.queue = k.queue AND t.queue_key = k.queue_key)
ON CONFLICT (queue, queue_key) DO NOTHING

-- name: advance_turns
-- The turns a fair queue's keys took in one admission: :taken is a JSON array of
-- [queue, key ('' for runs without one), runs admitted, cost of one]; each key's finish
-- moves past its admissions.
UPDATE plait_queue_turns
SET finish = finish + (SELECT json_extract(a.value, '$[2]') * json_extract(a.value, '$[3]')
                       FROM json_each(:taken) a
                       WHERE json_extract(a.value, '$[0]') = plait_queue_turns.queue
                           AND json_extract(a.value, '$[1]') = plait_queue_turns.queue_key)
WHERE EXISTS (SELECT 1 FROM json_each(:taken) a
              WHERE json_extract(a.value, '$[0]') = plait_queue_turns.queue
                  AND json_extract(a.value, '$[1]') = plait_queue_turns.queue_key)

-- name: advance_clocks
-- After advance_turns: each queue's clock moves to the start of its latest turn taken.
INSERT INTO plait_queue_clocks (queue, clock)
SELECT json_extract(a.value, '$[0]'), max(t.finish - json_extract(a.value, '$[3]'))
FROM json_each(:taken) a
JOIN plait_queue_turns t ON t.queue = json_extract(a.value, '$[0]')
    AND t.queue_key = json_extract(a.value, '$[1]')
WHERE true
GROUP BY 1
ON CONFLICT (queue) DO UPDATE SET clock = max(clock, excluded.clock)

-- name: forget_turns
-- A key of fair queue :queue with no runs due that the clock has passed is the same as
-- no key: forget it. A key a budget holds (in :held, as admit_runs takes it) or whose
-- runs a brake holds (their workflow paused) has no runs due either: when it comes back
-- it starts at the clock, with no turns saved up.
DELETE FROM plait_queue_turns
WHERE queue = :queue
    AND finish <= (SELECT clock FROM plait_queue_clocks WHERE queue = :queue)
    AND queue_key NOT IN (SELECT coalesce(r.queue_key, '') FROM plait_runs r
                          WHERE r.status = 'queued' AND r.wake_at <= :now
                              AND r.queue = :queue
                              AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                                              WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                                  OR (b.kind = 'queue' AND b.name = r.queue))
                              AND NOT EXISTS (
                                  SELECT 1 FROM json_each(:held) h
                                  WHERE json_extract(h.value, '$[0]') = r.queue
                                      AND (json_extract(h.value, '$[1]') IS NULL
                                           OR json_extract(h.value, '$[1]') = r.queue_key)))

-- name: log_admission
INSERT INTO plait_queue_admissions (queue, at) VALUES (?, ?)

-- name: prune_admissions
DELETE FROM plait_queue_admissions WHERE queue = ? AND at <= ?

-- name: claim_queue_jobs
-- claim_step_jobs for functions admitted through limited queues: :queues is a JSON array
-- of objects (name, concurrency, rate, window, functions); a job holds its queue's slot
-- while its lease runs. A job of a queue held in :held (as for admit_runs) waits.
WITH conf AS (
    SELECT json_extract(value, '$.name') AS name,
        json_extract(value, '$.concurrency') AS concurrency,
        json_extract(value, '$.rate') AS rate,
        json_extract(value, '$.window') AS rate_window,
        json_extract(value, '$.functions') AS functions
    FROM json_each(:queues)
), fmap AS (
    SELECT f.value AS fn, c.name AS queue FROM conf c, json_each(c.functions) f
), held AS (
    SELECT m.queue, count(*) AS n FROM plait_jobs j JOIN fmap m ON m.fn = j.function
    WHERE j.lease_owner IS NOT NULL AND j.lease_until >= :now
    GROUP BY m.queue
), recent AS (
    SELECT q.queue, count(*) AS n FROM plait_queue_admissions q
    JOIN conf c ON c.name = q.queue AND c.rate IS NOT NULL
    WHERE q.at > :now - c.rate_window
    GROUP BY q.queue
), due AS (
    SELECT j.rowid AS rid, j.available_at, m.queue, c.concurrency, c.rate,
        row_number() OVER (PARTITION BY m.queue
            ORDER BY j.available_at, j.run_id, j.step_key) AS nth
    FROM plait_jobs j JOIN fmap m ON m.fn = j.function JOIN conf c ON c.name = m.queue
    WHERE j.available_at <= :now AND (j.lease_owner IS NULL OR j.lease_until < :now)
        AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = j.run_id AND r.status = 'running'
                    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                                    WHERE (b.kind = 'workflow' AND b.name = r.workflow)
                                        OR (b.kind = 'queue' AND b.name = coalesce(r.queue, 'default'))
                                        OR (b.kind = 'queue' AND b.name = m.queue))
                    AND NOT EXISTS (SELECT 1 FROM json_each(:held) h
                                    WHERE json_extract(h.value, '$[0]') = m.queue
                                        AND (json_extract(h.value, '$[1]') IS NULL
                                             OR json_extract(h.value, '$[1]') = r.queue_key)))
), fits AS (
    SELECT d.rid FROM due d
    LEFT JOIN held h ON h.queue = d.queue
    LEFT JOIN recent rc ON rc.queue = d.queue
    WHERE (d.concurrency IS NULL OR d.nth <= d.concurrency - coalesce(h.n, 0))
        AND (d.rate IS NULL OR d.nth <= d.rate - coalesce(rc.n, 0))
    ORDER BY d.available_at
    LIMIT :limit
)
UPDATE plait_jobs SET lease_owner = :owner, lease_until = :until,
    deliveries = deliveries + 1
WHERE rowid IN (SELECT rid FROM fits)
RETURNING run_id, step_key, function, deliveries

-- name: queue_depths
SELECT queue, sum(status = 'queued'), sum(status IN ('running', 'suspended', 'paused'))
FROM plait_runs
WHERE status = 'queued'
    OR (queue IS NOT NULL AND status IN ('running', 'suspended', 'paused'))
GROUP BY queue ORDER BY queue

-- name: queue_keys
-- Per key of queue :queue with live runs: waiting, holding a slot, and how far ahead of
-- the queue's clock a fair queue has served it.
SELECT r.queue_key, sum(r.status = 'queued'), sum(r.status IN ('running', 'suspended', 'paused')),
    (SELECT t.finish - coalesce(c.clock, 0) FROM plait_queue_turns t
     LEFT JOIN plait_queue_clocks c ON c.queue = t.queue
     WHERE t.queue = :queue AND t.queue_key = coalesce(r.queue_key, ''))
FROM plait_runs r
WHERE r.queue = :queue AND r.status IN ('queued', 'running', 'suspended', 'paused')
GROUP BY r.queue_key ORDER BY r.queue_key

-- == brakes and workers =====================================================================

-- name: put_brake
-- Pause a workflow or a queue; pausing one that is paused changes nothing.
INSERT INTO plait_brakes (kind, name, paused_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING

-- name: delete_brake
DELETE FROM plait_brakes WHERE kind = ? AND name = ?

-- name: list_brakes
SELECT kind, name, paused_at FROM plait_brakes ORDER BY kind, name

-- name: park_braked
-- Runs :from (running) of a paused workflow or queue that no live lease holds stop as
-- :paused: no pass is theirs now, and none starts until they are resumed. A lease run
-- out is cleared, so a stalled holder's next write is refused.
UPDATE plait_runs SET status = :paused, lease_owner = NULL, lease_until = NULL,
    wake_at = NULL, updated_at = :now
WHERE status = :from AND (lease_owner IS NULL OR lease_until < :now)
    AND EXISTS (SELECT 1 FROM plait_brakes b
                WHERE (b.kind = 'workflow' AND b.name = plait_runs.workflow)
                    OR (b.kind = 'queue' AND b.name = coalesce(plait_runs.queue, 'default')))
RETURNING id

-- name: release_unbraked
-- Paused runs no brake holds any more go on as :to, due at once: their next pass
-- replays what they did and starts the step they stopped before.
UPDATE plait_runs SET status = :to, wake_at = :now, wakeups = wakeups + 1,
    idle_sweeps = 0, updated_at = :now
WHERE status = :paused
    AND NOT EXISTS (SELECT 1 FROM plait_brakes b
                    WHERE (b.kind = 'workflow' AND b.name = plait_runs.workflow)
                        OR (b.kind = 'queue' AND b.name = coalesce(plait_runs.queue, 'default')))
RETURNING id

-- name: put_worker
-- A worker records itself as it starts, and again with each heartbeat (seen_at).
INSERT INTO plait_workers (id, host, pid, app, version, queues, workflows, started_at,
    seen_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, workflows = excluded.workflows,
    queues = excluded.queues

-- name: list_workers
SELECT id, host, pid, app, version, queues, workflows, started_at, seen_at
FROM plait_workers WHERE seen_at >= ? ORDER BY started_at, id

-- name: forget_workers
DELETE FROM plait_workers WHERE seen_at < ?


-- == schedules ===============================================================================

-- name: put_schedule
INSERT INTO plait_schedules (name, workflow, definition, status, source, owner, next_tick,
    last_tick, last_run_id, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow,
    definition = excluded.definition, source = excluded.source, owner = excluded.owner,
    next_tick = excluded.next_tick, updated_at = excluded.updated_at
WHERE plait_schedules.definition IS NOT excluded.definition
    OR plait_schedules.owner IS NOT excluded.owner

-- name: schedule_owner
-- A stored schedule's owner, read in the transaction that stores over it.
SELECT owner FROM plait_schedules WHERE name = ?

-- name: get_schedules
SELECT s.name, s.workflow, s.definition, s.status, s.source, s.owner, s.next_tick,
    s.last_tick, s.last_run_id, s.created_at, s.updated_at, r.status
FROM plait_schedules s LEFT JOIN plait_runs r ON r.id = s.last_run_id
WHERE ? IS NULL OR s.name = ?
ORDER BY s.name

-- name: due_schedules
SELECT s.name, s.workflow, s.definition, s.status, s.source, s.owner, s.next_tick,
    s.last_tick, s.last_run_id, s.created_at, s.updated_at, NULL
FROM plait_schedules s
WHERE s.status = 'active' AND s.next_tick <= ?
ORDER BY s.next_tick LIMIT ?

-- name: next_schedule_tick
SELECT min(next_tick) FROM plait_schedules WHERE status = 'active'

-- name: schedule_for_fire
-- A schedule's status and next tick, and the run its last run goes on as: the run that
-- one continued as new to, and so on (the last run itself when it did not continue),
-- with its status.
WITH RECURSIVE chain (id, status, next, depth) AS (
    SELECT r.id, r.status, r.continued_to, 0 FROM plait_schedules s
    JOIN plait_runs r ON r.id = s.last_run_id WHERE s.name = :name
    UNION ALL
    SELECT r.id, r.status, r.continued_to, c.depth + 1 FROM chain c
    JOIN plait_runs r ON r.id = c.next WHERE c.status = 'continued'
)
SELECT s.status, s.next_tick, last.id, last.status FROM plait_schedules s
LEFT JOIN (SELECT id, status FROM chain ORDER BY depth DESC LIMIT 1) last ON 1
WHERE s.name = :name

-- name: fired_schedule
UPDATE plait_schedules SET next_tick = ?, last_tick = coalesce(?, last_tick),
    last_run_id = coalesce(?, last_run_id), updated_at = ?
WHERE name = ?

-- name: set_schedule_status
UPDATE plait_schedules SET status = ?, next_tick = ?, updated_at = ? WHERE name = ?

-- name: delete_schedule
DELETE FROM plait_schedules WHERE name = ?

-- == approvals, values, forks, retention ====================================================

-- name: set_value
INSERT INTO plait_values (run_id, key, value, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value,
    updated_at = excluded.updated_at

-- name: get_values
SELECT key, value FROM plait_values WHERE run_id = ? ORDER BY key

-- name: run_marks
-- What changes when anything a run's page shows changes, read without its values: an
-- event stream reads this every tick and the run itself only when it moved.
SELECT r.status, r.updated_at,
    (SELECT count(*) FROM plait_steps WHERE run_id = r.id),
    (SELECT max(updated_at) FROM plait_steps WHERE run_id = r.id),
    (SELECT count(*) FROM plait_values WHERE run_id = r.id),
    (SELECT max(updated_at) FROM plait_values WHERE run_id = r.id),
    (SELECT count(*) FROM plait_events WHERE run_id = r.id AND outcome IS NOT NULL),
    (SELECT max(coalesce(judged_at, created_at)) FROM plait_events
     WHERE run_id = r.id AND outcome IS NOT NULL),
    (SELECT count(*) FROM plait_runs WHERE parent_run_id = r.id),
    (SELECT max(updated_at) FROM plait_runs WHERE parent_run_id = r.id),
    (SELECT count(*) FROM plait_stream_entries WHERE run_id = r.id AND "offset" = 0)
FROM plait_runs r WHERE r.id = ?

-- name: step_status
SELECT status, wake_at FROM plait_steps WHERE run_id = ? AND key = ?

-- name: take_decision
-- A held decision taken by a pass (only if no other pass took it first); a refused one
-- keeps who sent it, when and why, never its data.
UPDATE plait_events SET consumed_by = :key, outcome = :outcome, reason = :reason,
    judged_at = :now, payload = CASE WHEN :outcome = 'refused' THEN NULL ELSE payload END
WHERE id = :event_id AND consumed_by IS NULL

-- name: refuse_accepted_decision
-- The accepted decision of a gate is refused after all (the workflow's schema failed it):
-- it keeps who sent it, when and why, never its data.
UPDATE plait_events SET outcome = :outcome, reason = :reason, judged_at = :now,
    payload = CASE WHEN :outcome = 'refused' THEN NULL ELSE payload END
WHERE run_id = :run_id AND consumed_by = :key AND outcome = 'accepted'

-- name: insert_decision
-- consumed_by: the gate's key for a judged decision, '' for one refused before any gate
-- was reached, NULL for one held for its gate.
INSERT INTO plait_events (run_id, name, payload, created_at, consumed_by, decided_by,
    outcome, reason, judged_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: refused_decisions
-- How many refused decisions gate ? (consumed_by; '' for none reached) of run ? holds.
SELECT count(*) FROM plait_events WHERE run_id = ? AND consumed_by = ? AND outcome = 'refused'

-- name: get_decisions
SELECT id, name, payload, decided_by, created_at, outcome, reason, judged_at, consumed_by
FROM plait_events WHERE run_id = ? AND outcome IS NOT NULL ORDER BY id

-- name: list_gates
-- Gates of live runs; a NULL status matches every gate.
SELECT s.run_id, s.key, s.seq, s.name, s.kind, s.function, s.status, s.input, s.output,
    s.error, s.attempts, s.failures, s.retries, s.retry_delay, s.timeout, s.invocation_id,
    s.child_run_id, s.branch, s.from_key, s.queued, s.wake_at, s.created_at, s.updated_at,
    s.delivered, s.retried_failures, r.workflow, r.owner, r.status
FROM plait_steps s JOIN plait_runs r ON r.id = s.run_id
WHERE s.kind = 'approval' AND (:status IS NULL OR s.status = :status)
    AND r.status IN ('running', 'suspended', 'paused', 'needs_attention')
ORDER BY s.created_at LIMIT :limit

-- name: set_forked_from
UPDATE plait_runs SET forked_from = ? WHERE id = ?

-- name: record_version
-- The version of the code a fork made without it replays on, written by its first pass.
UPDATE plait_runs SET version = ? WHERE id = ? AND version IS NULL

-- name: prune_roots
-- The next ended top-level runs to prune, oldest first after the cursor, read from the
-- index plait_runs_ended (its predicate is repeated word for word): the status index
-- would sort every ended run for each batch.
SELECT id, updated_at FROM plait_runs INDEXED BY plait_runs_ended
WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL
    AND status IN (SELECT value FROM json_each(:statuses)) AND updated_at < :cutoff
    AND (updated_at > :after_at OR (updated_at = :after_at AND id > :after_id))
ORDER BY updated_at, id LIMIT :limit

-- name: prune_trees
-- Every run of the given trees (a JSON array of root ids) whose runs have all ended.
WITH RECURSIVE tree(root, id, status) AS (
    SELECT id, id, status FROM plait_runs WHERE id IN (SELECT value FROM json_each(?))
    UNION ALL
    SELECT t.root, c.id, c.status FROM plait_runs c JOIN tree t ON c.parent_run_id = t.id
), whole AS (
    SELECT root FROM tree GROUP BY root
    HAVING min(status IN ('completed', 'failed', 'cancelled', 'continued')) = 1
)
SELECT t.id FROM tree t JOIN whole w ON w.root = t.root

-- name: prune_attempts
DELETE FROM plait_attempts WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_steps
DELETE FROM plait_steps WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_events
DELETE FROM plait_events WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_requests
DELETE FROM plait_requests WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_timers
DELETE FROM plait_timers WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_jobs
DELETE FROM plait_jobs WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_state
DELETE FROM plait_state WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_values
DELETE FROM plait_values WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_tags
DELETE FROM plait_run_tags WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_stream_entries
DELETE FROM plait_stream_entries WHERE run_id IN (SELECT value FROM json_each(?))

-- name: prune_runs
DELETE FROM plait_runs WHERE id IN (SELECT value FROM json_each(?))

-- == requests ================================================================================

-- name: insert_request
INSERT INTO plait_requests (run_id, name, data, status, refusal, created_at, deadline)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: get_request
SELECT id, run_id, name, data, status, taken_by, reply, refusal, created_at, deadline
FROM plait_requests WHERE id = ?

-- name: take_request
UPDATE plait_requests SET status = ?, taken_by = ? WHERE id = ? AND run_id = ? AND status = ?

-- name: answer_request
UPDATE plait_requests SET status = ?, reply = ?, refusal = ?, answered_at = ?
WHERE id = ? AND run_id = ? AND status = ?

-- name: withdraw_request
UPDATE plait_requests SET status = ?, answered_at = ? WHERE id = ? AND status = ?

-- == streams =================================================================================

-- name: append_stream_entry
-- The workflow's own 'data' entry (?3 the value) at the stream's next offset.
INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key, attempt, at)
SELECT ?1, ?2, coalesce(max("offset") + 1, 0), 'data', ?3, NULL, NULL, ?4
FROM plait_stream_entries WHERE run_id = ?1 AND stream = ?2

-- name: next_stream_offset
SELECT coalesce(max("offset") + 1, 0) FROM plait_stream_entries WHERE run_id = ? AND stream = ?

-- name: attempt_running
-- Whether step ?2's attempt ?3 still runs: entries of an attempt that ended (it failed, was
-- cancelled or interrupted, or a flush comes late) are left out.
SELECT 1 FROM plait_steps
WHERE run_id = ? AND key = ? AND attempts = ? AND attempt_status = 'running'

-- name: insert_stream_entry
INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key, attempt, at)
VALUES (?, ?, ?, 'data', ?, ?, ?, ?)

-- name: read_stream
SELECT "offset", kind, value, step_key, attempt, at FROM plait_stream_entries
WHERE run_id = ? AND stream = ? AND "offset" > ? ORDER BY "offset" LIMIT ?

-- name: read_stream_settled
-- Without resets, and without the entries of attempts that did not succeed (?4: the
-- status of a step whose latest attempt succeeded).
SELECT e."offset", e.kind, e.value, e.step_key, e.attempt, e.at
FROM plait_stream_entries AS e
WHERE e.run_id = ?1 AND e.stream = ?2 AND e."offset" > ?3 AND e.kind <> 'reset'
    AND (e.step_key IS NULL OR EXISTS (
        SELECT 1 FROM plait_steps AS s
        WHERE s.run_id = e.run_id AND s.key = e.step_key AND s.attempts = e.attempt
            AND s.status = ?4))
ORDER BY e."offset" LIMIT ?5

-- name: stream_names
SELECT DISTINCT stream FROM plait_stream_entries WHERE run_id = ? ORDER BY stream

-- == stored queue limits and spend ==========================================================

-- name: put_queue_limits
-- A queue's limits as an app declares them, replacing what was stored for the queue.
INSERT INTO plait_queue_limits (name, concurrency, per_key, rate, rate_window, budget,
    budget_per_key, fair, app, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
    per_key = excluded.per_key, rate = excluded.rate, rate_window = excluded.rate_window,
    budget = excluded.budget, budget_per_key = excluded.budget_per_key, fair = excluded.fair,
    app = excluded.app,
    updated_at = excluded.updated_at

-- name: list_queue_limits
SELECT name, concurrency, per_key, rate, rate_window, budget, budget_per_key, fair, app,
    updated_at
FROM plait_queue_limits ORDER BY name

-- name: insert_spend
-- Spend of a run's step attempt, counted against :queue (null: the run's queue) with the
-- run's key; spend of a step in no queue is not kept.
INSERT INTO plait_spend (queue, queue_key, unit, amount, at, run_id, step_key, attempt)
SELECT coalesce(:queue, r.queue), r.queue_key, :unit, :amount, :at, :run_id, :step_key,
    :attempt
FROM plait_runs r WHERE r.id = :run_id AND coalesce(:queue, r.queue) IS NOT NULL

-- name: spend_totals
-- The spend of each (queue, unit) in :budgets (a JSON array of objects: queue, unit,
-- since, per_key) since its time, per key where per_key, with the oldest entry counted.
WITH conf AS (
    SELECT json_extract(value, '$.queue') AS queue, json_extract(value, '$.unit') AS unit,
        json_extract(value, '$.since') AS since, json_extract(value, '$.per_key') AS per_key
    FROM json_each(:budgets)
)
SELECT s.queue, CASE WHEN c.per_key THEN s.queue_key END AS key, s.unit, sum(s.amount),
    min(s.at)
FROM plait_spend s JOIN conf c ON c.queue = s.queue AND c.unit = s.unit
WHERE s.at > c.since
GROUP BY s.queue, CASE WHEN c.per_key THEN s.queue_key END, s.unit
ORDER BY 1, 2, 3

-- name: prune_spend
DELETE FROM plait_spend WHERE queue = ? AND at <= ?

-- name: queue_key_depths
-- Per queue and key: live runs waiting (queued) and holding a slot.
SELECT queue, queue_key, sum(status = 'queued'), sum(status IN ('running', 'suspended', 'paused'))
FROM plait_runs
WHERE queue IS NOT NULL AND queue_key IS NOT NULL
    AND status IN ('queued', 'running', 'suspended', 'paused')
GROUP BY queue, queue_key ORDER BY queue, queue_key

-- name: database_files
-- The files of a connection's databases (main first): whose file a caller's connection is.
SELECT name, file FROM pragma_database_list
