-- Streams a run writes (wf.stream, ctx.stream): append-only entries, offsets dense from 0
-- in each stream. The resets of failed attempts and the ends of runs are written by the
-- triggers of functions/streams.sql.
-- description: streams: stream entries

-- One entry of a run's stream: 'data' (value: the JSON written; step_key and attempt: the
-- step attempt that wrote it, NULL for the workflow's own writes), 'reset' (step_key and
-- attempt: the attempt whose entries readers drop) or 'end'.
CREATE TABLE @schema@.stream_entries (
    run_id   text NOT NULL,
    stream   text NOT NULL,
    "offset" integer NOT NULL,
    kind     text NOT NULL,
    value    jsonb,
    step_key text,
    attempt  integer,
    at       timestamptz NOT NULL,
    PRIMARY KEY (run_id, stream, "offset")
);

-- the entries of one step attempt (a reset finds the streams it wrote to)
CREATE INDEX stream_entries_attempt ON @schema@.stream_entries (run_id, step_key, attempt)
    WHERE step_key IS NOT NULL;
-- the first entry of each stream: the run's page counts its streams in its marks
CREATE INDEX stream_entries_first ON @schema@.stream_entries (run_id) WHERE "offset" = 0;
