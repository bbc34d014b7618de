-- plait schema for SQLite, version 3: the order a workflow saw its step outcomes in.
-- description: steps remember when the workflow saw their outcome
--
-- Replay hands a workflow its step outcomes in the order it first saw them, so that
-- concurrent branches take the same keys and results on every pass. NULL: not seen yet
-- (or recorded before version 3; such steps are handed back in first-reach order).

ALTER TABLE plait_steps ADD COLUMN delivered INTEGER;

-- A retried run gives a failed step a fresh retry budget without forgetting its earlier
-- failures, so attempts that neither failed nor succeeded (interruptions) still count
-- right: the budget counts failures after retried_failures.
ALTER TABLE plait_steps ADD COLUMN retried_failures INTEGER NOT NULL DEFAULT 0;
