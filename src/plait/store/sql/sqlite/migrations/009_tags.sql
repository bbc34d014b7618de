-- Run tags: a run's tags on its row (JSON, read with the run), and one row per tag in
-- plait_run_tags, whose index on (key, value, created time, run_id) finds the runs of a tag without a
-- walk through every run.
-- description: run tags

ALTER TABLE plait_runs ADD COLUMN tags TEXT;

-- A run's tags, one row per (key, value), written with the run's tags column.
CREATE TABLE plait_run_tags (
    run_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    -- the run's created_at: a page of the runs of a tag is read from the index in the
    -- list's order, not sorted from every run of the tag
    run_created_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE INDEX plait_run_tags_pair ON plait_run_tags (key, value, run_created_at DESC, run_id);
