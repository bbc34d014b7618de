-- Run tags: a run's tags on its row (json, read with the run), and one row per tag in
-- run_tags, whose index on (key, value, run_id) finds the runs of a tag without a walk
-- through every run.
-- description: run tags

ALTER TABLE @schema@.runs ADD COLUMN tags json;

-- A run's tags, one row per (key, value), written with the run's tags column.
CREATE TABLE @schema@.run_tags (
    run_id text NOT NULL,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE INDEX run_tags_pair ON @schema@.run_tags (key, value, run_id);

ALTER TYPE @schema@.new_run ADD ATTRIBUTE tags json;
