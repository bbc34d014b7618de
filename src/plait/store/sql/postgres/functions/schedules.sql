-- Schedules: the ticks of a schedule start runs.

-- Start a schedule's due ticks and move its next tick, if nobody did since the caller
-- read it (p_expected: the next tick it read; NULL for a manual trigger, which moves no
-- tick and ignores the overlap policy). With p_skip, no tick starts while the schedule's
-- last run is queued or running, and one look starts at most one run. A last run that
-- continued as new goes on as the run it continued to (and so on): that run counts, and
-- becomes the schedule's last run. Returns the ids of the runs started, or NULL when
-- another process got there first.
CREATE OR REPLACE FUNCTION @schema@.fire_schedule(
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
    v_going_on text;
    v_going_status text;
BEGIN
    SELECT * INTO s FROM @schema@.schedules WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_expected IS NOT NULL THEN
        IF s.status <> 'active' OR s.next_tick IS DISTINCT FROM p_expected THEN
            RETURN NULL;
        END IF;
        WITH RECURSIVE chain (id, status, next, depth) AS (
            SELECT r.id, r.status, r.continued_to, 0 FROM @schema@.runs r
            WHERE r.id = s.last_run_id
            UNION ALL
            SELECT r.id, r.status, r.continued_to, c.depth + 1 FROM chain c
            JOIN @schema@.runs r ON r.id = c.next WHERE c.status = 'continued'
        )
        SELECT id, status INTO v_going_on, v_going_status FROM chain
        ORDER BY depth DESC LIMIT 1;
        -- paused: a running run a brake holds, which goes on once let go
        live := p_skip AND coalesce(v_going_status IN ('queued', 'running', 'paused'), false);
    END IF;
    FOREACH n IN ARRAY p_runs LOOP
        EXIT WHEN live;
        IF @schema@.insert_run(@schema@.braked_start(n), p_now) THEN
            started := started || n.id;
            v_last := n.id;
            v_last_tick := n.scheduled_at;
            live := p_skip AND p_expected IS NOT NULL;
        END IF;
    END LOOP;
    UPDATE @schema@.schedules SET
        next_tick = CASE WHEN p_expected IS NULL THEN next_tick ELSE p_next END,
        last_tick = coalesce(v_last_tick, last_tick),
        last_run_id = coalesce(v_last, v_going_on, last_run_id),
        updated_at = p_now
    WHERE name = p_name;
    RETURN started;
END $$;

-- Store a schedule as put_schedule does, but only over the schedule the caller read
-- (p_found false: none of that name; true: one owned by p_read_owner, NULL for none):
-- true if it wrote, false if nothing changed, NULL (writing nothing) when another
-- schedule is stored now. The insert waits for one made meanwhile and the row lock
-- holds the owner read until the update, so two callers deciding on one read cannot
-- both store.
CREATE OR REPLACE FUNCTION @schema@.put_schedule_as_read(
    p_name text, p_workflow text, p_definition json, p_status text, p_source text,
    p_owner text, p_next timestamptz, p_now timestamptz, p_found boolean, p_read_owner text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    stored_owner text;
BEGIN
    INSERT INTO @schema@.schedules (name, workflow, definition, status, source, owner,
        next_tick, created_at, updated_at)
    VALUES (p_name, p_workflow, p_definition, p_status, p_source, p_owner, p_next, p_now,
        p_now)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT owner INTO stored_owner FROM @schema@.schedules WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR NOT p_found OR stored_owner IS DISTINCT FROM p_read_owner THEN
        RETURN NULL;  -- made, changed hands or deleted since the caller read it
    END IF;
    UPDATE @schema@.schedules SET workflow = p_workflow, definition = p_definition,
        source = p_source, owner = p_owner, next_tick = p_next, updated_at = p_now
    WHERE name = p_name AND (definition::text IS DISTINCT FROM p_definition::text
                             OR owner IS DISTINCT FROM p_owner);
    RETURN FOUND;
END $$;
