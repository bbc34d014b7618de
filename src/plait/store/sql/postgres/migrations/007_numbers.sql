-- Values are stored as json (their text as plait wrote it), not jsonb: jsonb keeps numbers
-- as numeric, which gave 1e300 back as a 301-digit int, 1e16 as 10000000000000000 and
-- -0.0 as 0. A row written before keeps what jsonb made of it (what it lost is gone).
-- The op type holds a steps row, so it is made anew around the change of steps (the
-- functions that take it go with it; the store applies them again after the migrations).
-- description: values: json, as written

DROP TYPE @schema@.op CASCADE;

ALTER TYPE @schema@.new_run ALTER ATTRIBUTE input TYPE json;
ALTER TYPE @schema@.step_end ALTER ATTRIBUTE output TYPE json, ALTER ATTRIBUTE error TYPE json;

ALTER TABLE @schema@.runs
    ALTER COLUMN input TYPE json USING input::json,
    ALTER COLUMN output TYPE json USING output::json,
    ALTER COLUMN error TYPE json USING error::json;
ALTER TABLE @schema@.steps
    ALTER COLUMN input TYPE json USING input::json,
    ALTER COLUMN output TYPE json USING output::json,
    ALTER COLUMN error TYPE json USING error::json,
    ALTER COLUMN reached_after TYPE json USING reached_after::json,
    ALTER COLUMN attempt_error TYPE json USING attempt_error::json;
ALTER TABLE @schema@.attempts
    ALTER COLUMN output TYPE json USING output::json,
    ALTER COLUMN error TYPE json USING error::json;
ALTER TABLE @schema@.events
    ALTER COLUMN payload TYPE json USING payload::json,
    ALTER COLUMN reason TYPE json USING reason::json;
ALTER TABLE @schema@.requests
    ALTER COLUMN data TYPE json USING data::json,
    ALTER COLUMN reply TYPE json USING reply::json,
    ALTER COLUMN refusal TYPE json USING refusal::json;
ALTER TABLE @schema@.state ALTER COLUMN value TYPE json USING value::json;
ALTER TABLE @schema@.run_values ALTER COLUMN value TYPE json USING value::json;
ALTER TABLE @schema@.workflow_versions ALTER COLUMN definition TYPE json USING definition::json;
ALTER TABLE @schema@.schedules ALTER COLUMN definition TYPE json USING definition::json;

-- One write of a pass (plait.store.ops.Op); which fields are set depends on kind. An
-- end_run op carries in parent the end of the parent's step that waits for the run, in
-- cut (with cancel_children) how a cancel ends the steps in flight, and in run the run
-- that continues it as new.
CREATE TYPE @schema@.op AS (
    kind     text,
    step     @schema@.steps,
    attempt  integer,
    worker   text,
    status   text,
    output   json,
    error    json,
    key      text,
    purpose  text,
    at       timestamptz,
    function text,
    event_id bigint,
    run      @schema@.new_run,
    name     text,
    parent   @schema@.step_end,
    cut      @schema@.cancel_cut
);

-- stream entries keep their values as written too
ALTER TABLE @schema@.stream_entries ALTER COLUMN value TYPE json USING value::json;
