-- A run's life from outside its passes: its insert, its wake-ups, its end (with the
-- cascade to its children and the settling of its parent's step), a cancel, a reopen, a
-- fork.

-- The status of a run, locked for an action from outside a pass. SQLSTATE PLT02: no such
-- run; PLT03: the run is in a status that does not allow the action (DETAIL: the status).
CREATE OR REPLACE FUNCTION @schema@.lock_for_action(p_run text, p_allowed text[])
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

-- Wake a running run: count the wake-up (a pass that started before it will go again) and
-- make it due at p_at unless it is due sooner. Listeners hear 'busy:<run>' at commit, of a
-- run that is not running too (what woke it, an event kept for a suspended run say,
-- changed it all the same), and 'due' when it is running: the process that wrote the
-- change tells nobody else (Notifier.run_woken). A wake-up never ends a run, so callers
-- waiting for its end sleep through it ('run:<run>' is the notification of a change that
-- may have ended one).
CREATE OR REPLACE FUNCTION @schema@.wake_run(p_run text, p_now timestamptz, p_at timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(@channel@, 'busy:' || p_run);
    UPDATE @schema@.runs SET wakeups = wakeups + 1, updated_at = p_now, idle_sweeps = 0,
        wake_at = CASE WHEN wake_at IS NULL OR wake_at > p_at THEN p_at ELSE wake_at END
    WHERE id = p_run AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(@channel@, 'due');
    RETURN true;
END $$;

-- Insert a run unless its id (or its de-duplication key, among live runs) is taken: leased
-- already when the caller drives it inline; in the status the runtime gave it (queued:
-- started through a queue, or to start later) and wake_at, the time it may start. False
-- when nothing was inserted.
CREATE OR REPLACE FUNCTION @schema@.insert_run(n @schema@.new_run, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    leased boolean := coalesce(n.lease_owner, '') <> '';
BEGIN
    INSERT INTO @schema@.runs (id, workflow, kind, version, status, input, parent_run_id,
        parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
        lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, trace,
        deadline_at, timeout, tags, debounce_key, debounce_until)
    VALUES (n.id, n.workflow, n.kind, n.version, n.status, n.input, n.parent_run_id,
        n.parent_step_key, n.owner, n.start_node, p_now, p_now,
        greatest(p_now, coalesce(n.not_before, p_now)), 1, n.lease_owner,
        CASE WHEN leased THEN p_now + make_interval(secs => n.lease_seconds) END,
        n.queue, n.queue_key, coalesce(n.priority, 0), n.dedup, n.scheduled_at, n.trace,
        n.deadline_at, n.timeout, n.tags, n.debounce_key, n.debounce_until)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF n.tags IS NOT NULL THEN
        INSERT INTO @schema@.run_tags (run_id, key, value)
        SELECT n.id, t.key, t.value FROM json_each_text(n.tags) t;
    END IF;
    IF NOT leased THEN
        -- the loop that admits queued runs, or the one that claims due ones (notify.py)
        PERFORM pg_notify(@channel@, CASE WHEN n.status = 'queued' THEN 'admit' ELSE 'due' END);
    END IF;
    RETURN true;
END $$;

-- Merge p_tags (a JSON object of str to str) into a run's tags: its column and its rows of
-- run_tags (wf.set_tags).
CREATE OR REPLACE FUNCTION @schema@.put_tags(p_run text, p_tags json)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- merged as jsonb (a key given again takes the new value), stored as json like every
    -- JSON column
    UPDATE @schema@.runs SET tags = (coalesce(tags::jsonb, '{}'::jsonb) || p_tags::jsonb)::json
    WHERE id = p_run;
    INSERT INTO @schema@.run_tags (run_id, key, value)
    SELECT p_run, t.key, t.value FROM json_each_text(p_tags) t
    ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value;
END $$;

-- A debounced start (n.debounce_key set) joins the run of its workflow, key and owner
-- that still waits for its start time: that run takes n's input and starts at
-- n.not_before (never past its debounce_until), its deadline moved with its start, and
-- n's tags are merged into its own (n's value on a key both have, as put_tags; unless that
-- makes more than 16, plait.tags.MAX_TAGS: then its tags stay as they are). NULL
-- when no run waits; then a run of the key whose start time has passed (it waits for its
-- queue) leaves the window, so that n may be inserted. The unique index runs_debounce
-- keeps one waiting run per key: of two processes debouncing a key at once, the one whose
-- insert finds the other's row joins it on its next try.
CREATE OR REPLACE FUNCTION @schema@.debounce_run(n @schema@.new_run, p_now timestamptz)
RETURNS @schema@.runs LANGUAGE plpgsql AS $$
DECLARE
    v_start timestamptz := coalesce(n.not_before, p_now);
    joined @schema@.runs;
BEGIN
    UPDATE @schema@.runs r SET input = n.input, updated_at = p_now,
        -- never past plait.tags.MAX_TAGS (16): past it, the run's tags stay as they are
        tags = CASE WHEN n.tags IS NULL OR (SELECT count(*) FROM jsonb_object_keys(
                    coalesce(r.tags::jsonb, '{}'::jsonb) || n.tags::jsonb)) > 16 THEN r.tags
            ELSE (coalesce(r.tags::jsonb, '{}'::jsonb) || n.tags::jsonb)::json END,
        wake_at = least(v_start, coalesce(r.debounce_until, v_start)),
        deadline_at = CASE WHEN r.timeout IS NULL THEN r.deadline_at
            ELSE least(v_start, coalesce(r.debounce_until, v_start))
                 + make_interval(secs => r.timeout) END
    WHERE r.workflow = n.workflow AND r.debounce_key = n.debounce_key
        AND coalesce(r.owner, '') = coalesce(n.owner, '')
        AND r.status = 'queued' AND r.wake_at > p_now
    RETURNING r.* INTO joined;
    IF FOUND THEN
        IF n.tags IS NOT NULL AND coalesce(joined.tags::jsonb, '{}'::jsonb) @> n.tags::jsonb THEN
            INSERT INTO @schema@.run_tags (run_id, key, value)
            SELECT joined.id, t.key, t.value FROM json_each_text(n.tags) t
            ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value;
        END IF;
        RETURN joined;
    END IF;
    UPDATE @schema@.runs r SET debounce_key = NULL
    WHERE r.workflow = n.workflow AND r.debounce_key = n.debounce_key
        AND coalesce(r.owner, '') = coalesce(n.owner, '')
        AND r.status = 'queued' AND r.wake_at <= p_now;
    RETURN NULL;
END $$;

-- n as a start writes it: a run that would start running while a brake holds its workflow
-- or its queue (none: the default queue) is accepted and waits queued
-- (plait.runtime.runs.BRAKED_START; new_run has no field for it), leased to no one
-- (an inline starter does not drive it). Read in the start's own transaction, so a brake
-- another process committed counts at once, not when this process reads them again.
CREATE OR REPLACE FUNCTION @schema@.braked_start(n @schema@.new_run)
RETURNS @schema@.new_run LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF n.status <> 'running' THEN
        RETURN n;
    END IF;
    IF EXISTS (SELECT 1 FROM @schema@.brakes b
               WHERE (b.kind = 'workflow' AND b.name = n.workflow)
                   OR (b.kind = 'queue' AND b.name = coalesce(n.queue, 'default'))) THEN
        n.status := 'queued';
        n.lease_owner := NULL;
    END IF;
    RETURN n;
END $$;

-- create_run: create_run_as for n as a start writes it (braked_start).
CREATE OR REPLACE FUNCTION @schema@.create_run(
    n @schema@.new_run, p_now timestamptz, OUT created boolean, OUT run @schema@.runs
) LANGUAGE plpgsql AS $$
DECLARE
    one record;
BEGIN
    SELECT * INTO one FROM @schema@.create_run_as(@schema@.braked_start(n), p_now);
    created := one.created;
    run := one.run;
END $$;

-- create_run_as: the run with this id (or the live run holding its de-duplication key, or
-- the waiting run a debounced start joined), and whether this call created it. A live run
-- that ends between the insert and the look-up frees its key, and a run another process
-- inserted for a debounce key between the look-up and the insert takes this start on the
-- next try: the insert is tried again.
CREATE OR REPLACE FUNCTION @schema@.create_run_as(
    n @schema@.new_run, p_now timestamptz, OUT created boolean, OUT run @schema@.runs
) LANGUAGE plpgsql AS $$
BEGIN
    FOR attempt IN 1..5 LOOP
        IF n.debounce_key IS NOT NULL THEN
            run := @schema@.debounce_run(n, p_now);
            IF run.id IS NOT NULL THEN
                created := false;
                RETURN;
            END IF;
        END IF;
        created := @schema@.insert_run(n, p_now);
        SELECT * INTO run FROM @schema@.runs WHERE id = n.id;
        IF FOUND OR (n.dedup IS NULL AND n.debounce_key IS NULL) THEN
            RETURN;
        END IF;
        CONTINUE WHEN n.dedup IS NULL;
        SELECT * INTO run FROM @schema@.runs
        WHERE dedup = n.dedup AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention');
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the key of run % keeps changing hands', n.id;
END $$;

-- A start with dedup_policy 'replace': the run with n's id if it exists (an idempotency
-- key: nothing is cancelled then); else the live run holding n's de-duplication key, if it
-- is of n's owner, ends as p_end says (a cancel's end, its parent locked first as
-- cancel_run locks it) and n is created, in one transaction. A holder of another owner is
-- left as it is and returned, as a skip returns it. Returns the run, whether this call
-- created it, and the runs the cancel moved. Two processes replacing one key at once leave
-- one live run: the later insert finds the earlier one's run and ends it in turn.
CREATE OR REPLACE FUNCTION @schema@.replace_run(
    n @schema@.new_run, p_now timestamptz, p_end @schema@.op
) RETURNS TABLE (created boolean, run @schema@.runs, moved text[]) LANGUAGE plpgsql AS $$
DECLARE
    holder @schema@.runs;
    v_moved text[] := ARRAY[]::text[];
    live text[] := ARRAY['queued', 'running', 'suspended', 'paused', 'needs_attention'];
BEGIN
    n := @schema@.braked_start(n);
    FOR attempt IN 1..5 LOOP
        SELECT * INTO run FROM @schema@.runs r WHERE r.id = n.id;
        IF FOUND THEN
            RETURN QUERY SELECT false, run, v_moved;
            RETURN;
        END IF;
        SELECT * INTO holder FROM @schema@.runs r WHERE r.dedup = n.dedup AND r.status = ANY (live);
        IF FOUND THEN
            IF holder.owner IS DISTINCT FROM n.owner THEN
                RETURN QUERY SELECT false, holder, v_moved;
                RETURN;
            END IF;
            IF holder.parent_run_id IS NOT NULL THEN
                PERFORM 1 FROM @schema@.runs r WHERE r.id = holder.parent_run_id FOR UPDATE;
            END IF;
            PERFORM 1 FROM @schema@.runs r WHERE r.id = holder.id AND r.status = ANY (live)
                FOR UPDATE;
            IF FOUND THEN
                v_moved := v_moved || @schema@.end_run(holder.id, (p_end).status, NULL,
                    (p_end).error, (p_end).parent, (p_end).cut, p_now, live);
            END IF;
        END IF;
        IF @schema@.insert_run(n, p_now) THEN
            RETURN QUERY SELECT true, r, v_moved FROM @schema@.runs r WHERE r.id = n.id;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'de-duplication key % keeps changing hands', n.dedup;
END $$;

-- Runs started together: the starts one process hands in while one is on its way share a
-- statement and a transaction. Each is created exactly as create_run creates it alone, in
-- the order given, and each caller hears its own (created, run); the brakes are looked
-- up for each only while any is set.
CREATE OR REPLACE FUNCTION @schema@.create_runs(p_new @schema@.new_run[], p_now timestamptz)
RETURNS TABLE (created boolean, run @schema@.runs) LANGUAGE plpgsql AS $$
DECLARE
    n @schema@.new_run;
    one record;
    braked boolean := EXISTS (SELECT 1 FROM @schema@.brakes);
BEGIN
    FOREACH n IN ARRAY p_new LOOP
        IF braked THEN
            n := @schema@.braked_start(n);
        END IF;
        SELECT * INTO one FROM @schema@.create_run_as(n, p_now);
        created := one.created;
        run := one.run;
        RETURN NEXT;
    END LOOP;
END $$;

-- The runs of one start_many: each created as create_run creates it, in the order given,
-- all or none. SQLSTATE PLT06 (DETAIL the id, HINT the workflow of the run that holds it):
-- an id is held by a run of another workflow, and nothing is written.
CREATE OR REPLACE FUNCTION @schema@.create_all_runs(p_new @schema@.new_run[], p_now timestamptz)
RETURNS TABLE (created boolean, run @schema@.runs) LANGUAGE plpgsql AS $$
DECLARE
    n @schema@.new_run;
    one record;
BEGIN
    FOREACH n IN ARRAY p_new LOOP
        SELECT * INTO one FROM @schema@.create_run(n, p_now);
        IF NOT one.created AND (one.run).id = n.id AND (one.run).workflow <> n.workflow THEN
            RAISE EXCEPTION 'run % exists', n.id
                USING ERRCODE = 'PLT06', DETAIL = n.id, HINT = (one.run).workflow;
        END IF;
        created := one.created;
        run := one.run;
        RETURN NEXT;
    END LOOP;
END $$;

-- A child run ended: the parent's step that still waits for it (it names this child and
-- is running) ends as p_end says (its failures added to the step's), its attempt closes
-- with it, and the parent is woken.
CREATE OR REPLACE FUNCTION @schema@.settle_parent_step(
    p_parent text, p_key text, p_child text, p_end @schema@.step_end, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
BEGIN
    UPDATE @schema@.steps SET status = p_end.status, output = p_end.output,
        error = p_end.error,
        failures = failures + p_end.failures,
        updated_at = p_now
    WHERE run_id = p_parent AND key = p_key AND child_run_id = p_child
        AND status = 'running'
    RETURNING attempts INTO v_attempt;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM @schema@.close_attempt(p_parent, p_key, v_attempt, p_end.status,
        CASE WHEN p_end.status = 'succeeded' THEN p_end.output END,
        CASE WHEN p_end.status = 'failed' THEN p_end.error END, p_now);
    PERFORM @schema@.wake_run(p_parent, p_now, p_now);
END $$;

-- Move a run to p_status if it is in p_from (the terminal guard); returns every run that
-- moved. A suspended run keeps its timers and jobs; a run that ends loses them. A cancel
-- (an end with a cut, p_cut) cascades to the live children (running, suspended or
-- queued), parents before children, which is also the order in which rows are locked,
-- and every run it ends gets the same p_status, p_error, p_parent and p_cut; in each, a
-- step still running or with an attempt still open (p_cut.open_attempt) ends as p_cut
-- says, with the cancel's error (as steps.interrupt ends one that its pass saw
-- cancelled; a pass still at work on the run writes over it how its step really ended,
-- but not an interruption: see try_commit_batch), before the run's status moves, so the
-- resets of the cut attempts come before its streams' end. A run's end settles the parent's
-- waiting step as p_parent says (NULL: it settles nothing).
CREATE OR REPLACE FUNCTION @schema@.end_run(
    p_run text, p_status text, p_output json, p_error json, p_parent @schema@.step_end,
    p_cut @schema@.cancel_cut, p_now timestamptz, p_from text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
    parent_key text;
    children text[];
    child text;
    moved text[] := ARRAY[]::text[];
BEGIN
    IF p_cut IS NOT NULL AND p_status <> 'suspended' THEN
        -- the cut attempts' resets must come before the end the run's streams get when
        -- it moves (a trigger), or a follower stops at the end with their entries kept:
        -- so the children and the open attempts end first, if the run is one this moves
        PERFORM 1 FROM @schema@.runs WHERE id = p_run AND status = ANY (p_from) FOR UPDATE;
        IF NOT FOUND THEN
            RETURN ARRAY[]::text[];
        END IF;
        SELECT array_agg(id ORDER BY id) INTO children FROM @schema@.runs
        WHERE parent_run_id = p_run AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention');
        FOREACH child IN ARRAY coalesce(children, ARRAY[]::text[]) LOOP
            moved := moved || @schema@.end_run(child, p_status, NULL, p_error, p_parent,
                                               p_cut, p_now,
                                               ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
        END LOOP;
        UPDATE @schema@.steps SET status = p_cut.step, error = p_error,
            attempt_status = CASE WHEN attempt_status = p_cut.open_attempt THEN p_cut.attempt
                ELSE attempt_status END,
            attempt_error = CASE WHEN attempt_status = p_cut.open_attempt THEN p_error
                ELSE attempt_error END,
            attempt_finished = CASE WHEN attempt_status = p_cut.open_attempt THEN p_now
                ELSE attempt_finished END,
            updated_at = p_now
        WHERE run_id = p_run AND (attempt_status = p_cut.open_attempt OR status = 'running');
    END IF;
    UPDATE @schema@.runs SET status = p_status, output = p_output, error = p_error,
        updated_at = p_now, wake_at = NULL
    WHERE id = p_run AND status = ANY (p_from)
    RETURNING parent_run_id, parent_step_key INTO parent, parent_key;
    IF NOT FOUND THEN
        RETURN ARRAY[]::text[];
    END IF;
    moved := array_prepend(p_run, moved);
    PERFORM pg_notify(@channel@, 'run:' || p_run);
    IF p_status = 'suspended' THEN
        RETURN moved;
    END IF;
    DELETE FROM @schema@.timers WHERE run_id = p_run;
    DELETE FROM @schema@.jobs WHERE run_id = p_run;
    IF (p_parent).status IS NOT NULL AND coalesce(parent, '') <> ''
            AND coalesce(parent_key, '') <> '' THEN
        PERFORM @schema@.settle_parent_step(parent, parent_key, p_run, p_parent, p_now);
    END IF;
    RETURN moved;
END $$;

-- The run that continues p_run as new (p_run just ended continued): created, linked both
-- ways, handed the events p_run held, and waited for by the parent's step that waited for
-- p_run, in the transaction of the end, so a chain never has two live runs, nor none.
-- SQLSTATE PLT06: its id is taken.
CREATE OR REPLACE FUNCTION @schema@.start_successor(
    p_run text, n @schema@.new_run, p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT @schema@.insert_run(n, p_now) THEN
        RAISE EXCEPTION 'run % cannot continue as new: run % exists', p_run, n.id
            USING ERRCODE = 'PLT06';
    END IF;
    UPDATE @schema@.runs SET continued_from = p_run WHERE id = n.id;
    UPDATE @schema@.runs SET continued_to = n.id WHERE id = p_run;
    -- a schedule whose last run continued has its successor as its last run: the chain
    -- is one run of the schedule, and a prune may delete its ended links while it lives
    UPDATE @schema@.schedules SET last_run_id = n.id WHERE last_run_id = p_run;
    -- the events p_run accepted and did not take wait for its successor, in the order
    -- they came; decisions held for approval gates stay with p_run
    UPDATE @schema@.events SET run_id = n.id
    WHERE run_id = p_run AND consumed_by IS NULL AND decided_by IS NULL;
    IF n.parent_run_id IS NOT NULL AND n.parent_step_key IS NOT NULL THEN
        UPDATE @schema@.steps SET child_run_id = n.id
        WHERE run_id = n.parent_run_id AND key = n.parent_step_key AND child_run_id = p_run;
    END IF;
END $$;

-- Cancel a run (a queued one too): it ends p_status, as end_run ends it with the cut
-- p_cut. The run's parent is locked before the run, as every other writer that ends a
-- child does (the child's own end, a parent's end that cancels it): a cancel that locked
-- the child first, then its parent to settle its step, could deadlock with that parent
-- ending at the same moment.
CREATE OR REPLACE FUNCTION @schema@.cancel_run(
    p_run text, p_status text, p_error json, p_parent @schema@.step_end,
    p_cut @schema@.cancel_cut, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
BEGIN
    SELECT parent_run_id INTO parent FROM @schema@.runs WHERE id = p_run;
    IF parent IS NOT NULL THEN
        PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE;
    END IF;
    PERFORM @schema@.lock_for_action(p_run, ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
    RETURN @schema@.end_run(p_run, p_status, NULL, p_error, p_parent, p_cut, p_now,
                            ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
END $$;

-- A run past its deadline (queued, running or suspended, with deadline_at <= p_now) ends
-- p_status with p_error as cancel_run ends it (the cut p_cut, its parent's step as p_parent
-- says), but its live children end p_child_status with p_child_error first, their steps
-- in it as p_child_parent says. Locks as cancel_run does: the parent, the run, then its
-- children. Returns every run that moved, none when the run ended already or its deadline
-- is still to come.
CREATE OR REPLACE FUNCTION @schema@.time_out_run(
    p_run text, p_status text, p_error json, p_parent @schema@.step_end,
    p_cut @schema@.cancel_cut, p_child_status text, p_child_error json,
    p_child_parent @schema@.step_end, p_now timestamptz
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    parent text;
    children text[];
    child text;
    moved text[] := ARRAY[]::text[];
BEGIN
    SELECT parent_run_id INTO parent FROM @schema@.runs WHERE id = p_run;
    IF parent IS NOT NULL THEN
        PERFORM 1 FROM @schema@.runs WHERE id = parent FOR UPDATE;
    END IF;
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND deadline_at <= p_now
        AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention') FOR UPDATE;
    IF NOT FOUND THEN
        RETURN moved;
    END IF;
    SELECT array_agg(id ORDER BY id) INTO children FROM @schema@.runs
    WHERE parent_run_id = p_run AND status IN ('running', 'suspended', 'queued', 'paused', 'needs_attention');
    FOREACH child IN ARRAY coalesce(children, ARRAY[]::text[]) LOOP
        moved := moved || @schema@.end_run(child, p_child_status, NULL, p_child_error,
                                           p_child_parent, p_cut, p_now,
                                           ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
    END LOOP;
    RETURN @schema@.end_run(p_run, p_status, NULL, p_error, p_parent, p_cut, p_now,
                            ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']) || moved;
END $$;

-- A suspended or failed run goes on (resume, retry): if it is still p_from with p_seen
-- wake-ups, write p_ops (the steps the runtime reopened) and make it p_status (a retried
-- run of a queue waits for admission again: it gave its slot back when it failed) with the
-- deadline p_deadline the runtime gave it, and due now; a de-duplication key another live run took meanwhile stays with that run. No row
-- when it changed since the caller read it (nothing is written then). Listeners hear
-- 'busy:<run>': a reopen never ends a run. Due now, it is past any debounce window: its
-- debounce key (a run admitted by an older plait kept it) is cleared, so that it never
-- clashes with a run of the key waiting in its window (runs_debounce).
CREATE OR REPLACE FUNCTION @schema@.reopen_run(
    p_run text, p_from text, p_status text, p_deadline timestamptz, p_seen bigint,
    p_ops @schema@.op[], p_now timestamptz
) RETURNS SETOF @schema@.runs LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @schema@.lock_for_action(p_run, ARRAY[p_from]);
    PERFORM 1 FROM @schema@.runs WHERE id = p_run AND wakeups = p_seen;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
    -- a retried run's streams keep the end they were given: its offset was read (a client
    -- resumes after it), so a retry's entries follow it, and followers go on past it
    UPDATE @schema@.runs r SET
        status = p_status, deadline_at = p_deadline,
        error = NULL, output = NULL, updated_at = p_now, wake_at = p_now,
        wakeups = r.wakeups + 1, debounce_key = NULL, debounce_until = NULL,
        dedup = CASE WHEN EXISTS (SELECT 1 FROM @schema@.runs o
                                  WHERE o.dedup = r.dedup AND o.id <> r.id
                                      AND o.status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention'))
                     THEN NULL ELSE r.dedup END
    WHERE r.id = p_run;
    PERFORM pg_notify(@channel@, 'busy:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;

-- A fork: the new run (p_new) with the steps it keeps (p_ops), and where it came from, if
-- the source is still one of p_allowed (PLT02 / PLT03 as lock_for_action says if not).
-- With p_replace (an end_run op: a cancel's end) a live source then ends as a cancel ends
-- it, in the same transaction, its parent locked first as cancel_run locks it. Returns
-- the fork and the runs the cancel moved.
CREATE OR REPLACE FUNCTION @schema@.fork_run(
    p_new @schema@.new_run, p_from text, p_ops @schema@.op[], p_now timestamptz,
    p_allowed text[], p_replace @schema@.op
) RETURNS TABLE (forked @schema@.runs, moved text[]) LANGUAGE plpgsql AS $$
DECLARE
    parent text;
    v_moved text[] := ARRAY[]::text[];
BEGIN
    IF (p_replace).kind IS NOT NULL THEN
        SELECT r.parent_run_id INTO parent FROM @schema@.runs r WHERE r.id = p_from;
        IF parent IS NOT NULL THEN
            PERFORM 1 FROM @schema@.runs r WHERE r.id = parent FOR UPDATE;
        END IF;
    END IF;
    PERFORM @schema@.lock_for_action(p_from, p_allowed);
    IF NOT @schema@.insert_run(p_new, p_now) THEN
        RAISE EXCEPTION 'run % exists', p_new.id USING ERRCODE = 'PLT06';
    END IF;
    UPDATE @schema@.runs r SET forked_from = p_from WHERE r.id = p_new.id;
    PERFORM @schema@.apply_ops(p_new.id, p_ops, p_now);
    IF (p_replace).kind IS NOT NULL THEN
        v_moved := @schema@.end_run(p_from, (p_replace).status, NULL, (p_replace).error,
                                    (p_replace).parent, (p_replace).cut, p_now,
                                    ARRAY['running', 'suspended', 'queued', 'paused', 'needs_attention']);
    END IF;
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT r, v_moved FROM @schema@.runs r WHERE r.id = p_new.id;
END $$;

-- claim_due_runs: lease up to p_limit due running runs of the claimer's scope (its app's
-- workflows, its queues) to p_owner, soonest due first, leaving out those whose workflow
-- or queue is paused (brakes); their ids.
CREATE OR REPLACE FUNCTION @schema@.claim_due_runs(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_workflows text[], p_graphs boolean, p_queues text[], p_default_queue text
) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY UPDATE @schema@.runs SET lease_owner = p_owner, lease_until = p_until
    WHERE runs.id IN (
        SELECT d.id FROM @schema@.runs d
        WHERE d.wake_at <= p_now AND d.status = 'running'
            AND (d.lease_owner IS NULL OR d.lease_until < p_now)
            AND (p_workflows IS NULL OR d.workflow = ANY (p_workflows)
                OR (d.kind = 'graph' AND p_graphs))
            AND (p_queues IS NULL OR coalesce(d.queue, p_default_queue) = ANY (p_queues))
            AND NOT EXISTS (SELECT 1 FROM @schema@.brakes b
                            WHERE (b.kind = 'workflow' AND b.name = d.workflow)
                                OR (b.kind = 'queue' AND b.name = coalesce(d.queue, 'default')))
        ORDER BY d.wake_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    RETURNING runs.id;
END $$;

-- claim_due_passes: claim_due_runs, and what load_passes reads of each run it took, in
-- one round trip. The snapshot is read by a statement after the claim's (each statement
-- of a function sees what committed before it began), so it holds every write an earlier
-- holder of a lease committed before the claim.
-- The claim's commit does not wait for its WAL to reach the disk: a claim lost with the
-- server leaves the run unclaimed, and nothing it led to is lost with it, since no step
-- body starts before a commit that waits for the disk (which carries the claim's record).
-- The rows are records whose columns the caller names (queries.sql), so that defining the
-- function needs none of the tables later migrations add.
CREATE OR REPLACE FUNCTION @schema@.claim_due_passes(
    p_owner text, p_until timestamptz, p_now timestamptz, p_limit integer,
    p_workflows text[], p_graphs boolean, p_queues text[], p_default_queue text
) RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    taken text[] := ARRAY(SELECT @schema@.claim_due_runs(p_owner, p_until, p_now, p_limit,
        p_workflows, p_graphs, p_queues, p_default_queue));
BEGIN
    IF cardinality(taken) = 0 THEN
        RETURN;
    END IF;
    -- The read's plan is the same whatever runs were taken (each table by the taken
    -- run's id), but the planner, seeing the array, would plan it anew at every claim (a
    -- custom plan: about a third of a millisecond, more than the read itself): the
    -- generic plan is kept for the rest of the claim's transaction, which ends with it.
    PERFORM set_config('synchronous_commit', 'off', true),
        set_config('plan_cache_mode', 'force_generic_plan', true);
    RETURN QUERY SELECT t.id, t,
        ARRAY(SELECT s FROM @schema@.steps s WHERE s.run_id = t.id),
        ARRAY(SELECT e FROM @schema@.events e
              WHERE e.run_id = t.id AND e.consumed_by IS NULL ORDER BY e.id),
        ARRAY(SELECT st FROM @schema@.state st WHERE st.run_id = t.id),
        ARRAY(SELECT q FROM @schema@.requests q
              WHERE q.run_id = t.id AND q.status = 'sent' ORDER BY q.id)
    FROM @schema@.runs t WHERE t.id = ANY (taken);
END $$;

-- reopen_runs: reopen_run for each run of p_runs, in one transaction: run k with
-- p_from[k], p_status[k], p_deadline[k], p_seen[k] and the ops of p_ops after run k-1's
-- (up to p_ends[k]). One row per run, pos k: the run reopened, or NULL when it changed
-- since it was read. A run that is not in its status raises as reopen_run does, which
-- rolls back every one of them (the caller then reopens each alone, for its own answer).
CREATE OR REPLACE FUNCTION @schema@.reopen_runs(
    p_runs text[], p_from text[], p_status text[], p_deadline timestamptz[], p_seen bigint[],
    p_ends integer[], p_ops @schema@.op[], p_now timestamptz
) RETURNS TABLE (pos integer, reopened @schema@.runs) LANGUAGE plpgsql AS $$
DECLARE
    next_op integer := 1;
    one @schema@.runs;
BEGIN
    FOR k IN 1 .. coalesce(array_length(p_runs, 1), 0) LOOP
        SELECT * INTO one FROM @schema@.reopen_run(p_runs[k], p_from[k], p_status[k],
            p_deadline[k], p_seen[k], coalesce(p_ops[next_op:p_ends[k]], '{}'), p_now);
        pos := k;
        reopened := CASE WHEN FOUND THEN one END;
        RETURN NEXT;
        next_op := p_ends[k] + 1;
    END LOOP;
END $$;
