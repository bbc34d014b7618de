-- Streams a run writes (wf.stream, ctx.stream): append-only entries, offsets dense from 0
-- in each stream. A step attempt that fails or is interrupted gets a 'reset' entry in each
-- stream it wrote to; a run's end writes an 'end' entry in each of its streams.
-- description: streams: stream entries, their resets and ends

-- One entry of a run's stream: 'data' (value: the JSON written; step_key and attempt: the
-- step attempt that wrote it, NULL for the workflow's own writes), 'reset' (step_key and
-- attempt: the attempt whose entries readers drop) or 'end'.
CREATE TABLE plait_stream_entries (
    run_id   TEXT NOT NULL,
    stream   TEXT NOT NULL,
    "offset" INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    value    TEXT,
    step_key TEXT,
    attempt  INTEGER,
    at       REAL NOT NULL,
    PRIMARY KEY (run_id, stream, "offset")
) WITHOUT ROWID;

-- the entries of one step attempt (a reset finds the streams it wrote to)
CREATE INDEX plait_stream_entries_attempt ON plait_stream_entries (run_id, step_key, attempt)
    WHERE step_key IS NOT NULL;
-- the first entry of each stream: the run's page counts its streams in its marks
CREATE INDEX plait_stream_entries_first ON plait_stream_entries (run_id) WHERE "offset" = 0;

-- An attempt that ends failed, interrupted or cancelled resets what it wrote: readers drop
-- its entries. Whoever ends it (a pass, a step worker, a takeover, a cancel), the reset
-- follows in the same transaction.
CREATE TRIGGER plait_steps_attempt_resets_streams
AFTER UPDATE OF attempt_status ON plait_steps
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

-- A run's end ends each of its streams, whoever ends it.
CREATE TRIGGER plait_runs_end_ends_streams
AFTER UPDATE OF status ON plait_runs
WHEN NEW.status IN ('completed', 'failed', 'cancelled', 'continued')
    AND OLD.status NOT IN ('completed', 'failed', 'cancelled', 'continued')
BEGIN
    INSERT INTO plait_stream_entries (run_id, stream, "offset", kind, value, step_key,
                                      attempt, at)
    SELECT NEW.id, stream, max("offset") + 1, 'end', NULL, NULL, NULL, NEW.updated_at
    FROM plait_stream_entries WHERE run_id = NEW.id GROUP BY stream;
END;
