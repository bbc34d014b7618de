-- plait schema for PostgreSQL, version 12: wake-ups that say the run goes on.
-- description: a wake-up or a reopen notifies 'busy:<run>' (the run has not ended), so callers waiting for a run's end sleep through it
--
-- A caller waiting for a run to end (Engine.wait) reads the run again at every
-- notification that may have ended it. A wake-up (an event, a finished child, a finished
-- queued step) and a reopen (resume, retry) never end a run: they now say so, and only
-- the watchers of every change (streams, value waits) wake for them. 'run:<run>' stays
-- the notification of a change that may have settled it.

CREATE OR REPLACE FUNCTION @schema@.wake_run(p_run text, p_now timestamptz, p_at timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE @schema@.runs SET wakeups = wakeups + 1, updated_at = p_now, idle_sweeps = 0,
        wake_at = CASE WHEN wake_at IS NULL OR wake_at > p_at THEN p_at ELSE wake_at END
    WHERE id = p_run AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(@channel@, 'busy:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN true;
END $$;

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
    PERFORM pg_notify(@channel@, 'busy:' || p_run);
    PERFORM pg_notify(@channel@, 'work');
    RETURN QUERY SELECT * FROM @schema@.runs WHERE id = p_run;
END $$;
