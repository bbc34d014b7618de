-- plait schema for SQLite, version 9: which steps a step was reached after.
-- description: steps remember which step outcomes the workflow had received when it reached them
--
-- When a code workflow reaches a step, the keys of the steps whose outcomes the reaching
-- task had received by then are stored with it (a JSON list), so a run can be drawn as
-- it ran: one step after another, or side by side after the same step (a gather). The
-- list is written with the step's first write and never changes. NULL: recorded before
-- version 9, or a step of a graph workflow (drawn from its definition).

ALTER TABLE plait_steps ADD COLUMN reached_after TEXT;
