-- plait schema for SQLite, version 2: a step's latest attempt lives on the step row.
-- description: a step's latest attempt on its step row
--
-- A step that succeeds at its first attempt (nearly all of them) is then written to one
-- table only, so each commit touches fewer pages. plait_attempts keeps every earlier
-- attempt; an attempt moves there when the next one starts. get_history reads both.

ALTER TABLE plait_steps ADD COLUMN worker TEXT;
ALTER TABLE plait_steps ADD COLUMN attempt_status TEXT;     -- NULL: no attempt on the row
ALTER TABLE plait_steps ADD COLUMN attempt_error TEXT;
ALTER TABLE plait_steps ADD COLUMN attempt_started REAL;
ALTER TABLE plait_steps ADD COLUMN attempt_finished REAL;

-- the latest attempt of every step recorded by version 1 moves onto its step row
UPDATE plait_steps SET worker = a.worker, attempt_status = a.status, attempt_error = a.error,
    attempt_started = a.started_at, attempt_finished = a.finished_at
FROM plait_attempts a
WHERE a.run_id = plait_steps.run_id AND a.key = plait_steps.key AND a.attempt = plait_steps.attempts;

DELETE FROM plait_attempts WHERE EXISTS (
    SELECT 1 FROM plait_steps s WHERE s.run_id = plait_attempts.run_id
    AND s.key = plait_attempts.key AND s.attempts = plait_attempts.attempt
    AND s.attempt_status IS NOT NULL
);
