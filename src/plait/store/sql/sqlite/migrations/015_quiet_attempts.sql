-- The trigger that resets the streams of an attempt ended failed, interrupted or
-- cancelled watches attempt_error instead of attempt_status: every statement that ends an
-- attempt that way sets both, and the end of a succeeded attempt (the statement of nearly
-- every step) sets only the status now, so SQLite no longer enters the trigger's program
-- for it.
-- description: the stream-reset trigger watches attempt_error

DROP TRIGGER plait_steps_attempt_resets_streams;
CREATE TRIGGER plait_steps_attempt_resets_streams
AFTER UPDATE OF attempt_error ON plait_steps
WHEN OLD.attempt_status = 'running'
    AND NEW.attempt_status IN ('failed', 'interrupted', 'cancelled')
BEGIN
    INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key,
                                      attempt, at)
    SELECT NEW.run_id, w.stream,
        (SELECT max(e."offset") + 1 FROM plait_stream_entries AS e
         WHERE e.run_id = NEW.run_id AND e.stream = w.stream),
        'reset', NULL, NEW.key, NEW.attempts, NEW.updated_at
    FROM (SELECT DISTINCT stream FROM plait_stream_entries
          WHERE run_id = NEW.run_id AND step_key = NEW.key AND attempt = NEW.attempts
              AND kind = 'data') AS w;
END;
