-- plait schema for PostgreSQL, version 9: the trace a run belongs to.
-- description: runs keep the trace context current when they were started
--
-- With tracing on, the W3C trace context of the code that started a run is stored with
-- it (as JSON, the propagator's carrier), so every pass and step of the run, in any
-- process and after any restart, joins the starter's trace. NULL: not traced.

ALTER TABLE @schema@.runs ADD COLUMN trace text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE trace text;

-- insert_run of version 6 (queues, delayed starts, schedules), storing the trace too.
CREATE OR REPLACE FUNCTION @schema@.insert_run(n @schema@.new_run, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    leased boolean := coalesce(n.lease_owner, '') <> '';
    v_status text := coalesce(n.status, 'running');
BEGIN
    INSERT INTO @schema@.runs (id, workflow, kind, version, status, input, parent_run_id,
        parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
        lease_owner, lease_until, queue, queue_key, priority, dedup, scheduled_at, trace)
    VALUES (n.id, n.workflow, n.kind, n.version, v_status, n.input, n.parent_run_id,
        n.parent_step_key, n.owner, n.start_node, p_now, p_now,
        greatest(p_now, coalesce(n.not_before, p_now)), 1, n.lease_owner,
        CASE WHEN leased THEN p_now + make_interval(secs => n.lease_seconds) END,
        n.queue, n.queue_key, coalesce(n.priority, 0), n.dedup, n.scheduled_at, n.trace)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT leased THEN
        PERFORM pg_notify(@channel@, 'work');
    END IF;
    RETURN true;
END $$;
