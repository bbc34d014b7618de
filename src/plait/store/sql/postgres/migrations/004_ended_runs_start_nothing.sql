-- plait schema for PostgreSQL, version 4: a pass whose run ended under it starts nothing.
-- description: a batch committed after its run ended keeps step records only
--
-- A pass still holds its lease when another process cancels the run. Its batch is
-- committed (how its steps ended is worth keeping), but a child run, a timer or a job it
-- would start is dropped, so nothing outlives the cancel.

CREATE OR REPLACE FUNCTION @schema@.commit_batch(
    p_run text, p_fence text, p_ops @schema@.op[], p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o @schema@.op;
    parent text;
    holder text;
    v_status text;
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
        SELECT lease_owner, status INTO holder, v_status
        FROM @schema@.runs WHERE id = p_run FOR UPDATE;
        IF NOT FOUND OR holder IS DISTINCT FROM p_fence THEN
            RAISE EXCEPTION 'lost the lease on run %', p_run USING ERRCODE = 'PLT01';
        END IF;
        IF v_status IN ('completed', 'failed', 'cancelled') THEN
            p_ops := ARRAY(
                SELECT x FROM unnest(p_ops) AS x
                WHERE x.kind NOT IN ('create_child_run', 'set_timer', 'enqueue_job')
            );
        END IF;
    END IF;
    PERFORM @schema@.apply_ops(p_run, p_ops, p_now);
END $$;
