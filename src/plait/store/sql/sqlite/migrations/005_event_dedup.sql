-- Events with a de-duplication key: a run takes each key once (engine.send_event's dedup,
-- and wf.send_event, whose key is its step's invocation id).
-- description: events: dedup, unique per run

ALTER TABLE plait_events ADD COLUMN dedup TEXT;

-- a run takes an event of a de-duplication key once, held or consumed: a second send of
-- the key stores nothing (the insert's conflict), whichever process sends it
CREATE UNIQUE INDEX plait_events_dedup ON plait_events (run_id, dedup) WHERE dedup IS NOT NULL;
