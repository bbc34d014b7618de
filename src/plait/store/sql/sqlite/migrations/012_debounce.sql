-- Debounced starts: a run started with a debounce key, while it waits for its start time,
-- takes the input and the later start of the next start with its key instead of another
-- run starting; its start never passes debounce_until (the first start plus debounce_max).
-- description: debounced starts

ALTER TABLE plait_runs ADD COLUMN debounce_key TEXT;
ALTER TABLE plait_runs ADD COLUMN debounce_until REAL;

-- one run per workflow, debounce key and owner waits to start; a run whose start time has
-- passed leaves the window (its key is cleared) before the next start of the key inserts
CREATE UNIQUE INDEX plait_runs_debounce ON plait_runs (workflow, debounce_key, coalesce(owner, ''))
    WHERE debounce_key IS NOT NULL AND status = 'queued';
