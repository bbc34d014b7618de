-- Debounced starts: a run started with a debounce key, while it waits for its start time,
-- takes the input and the later start of the next start with its key instead of another
-- run starting; its start never passes debounce_until (the first start plus debounce_max).
-- description: debounced starts

ALTER TABLE @schema@.runs ADD COLUMN debounce_key text;
ALTER TABLE @schema@.runs ADD COLUMN debounce_until timestamptz;

-- one run per workflow, debounce key and owner waits to start; a run whose start time has
-- passed leaves the window (its key is cleared) before the next start of the key inserts
CREATE UNIQUE INDEX runs_debounce ON @schema@.runs (workflow, debounce_key, coalesce(owner, ''))
    WHERE debounce_key IS NOT NULL AND status = 'queued';

ALTER TYPE @schema@.new_run ADD ATTRIBUTE debounce_key text;
ALTER TYPE @schema@.new_run ADD ATTRIBUTE debounce_until timestamptz;
