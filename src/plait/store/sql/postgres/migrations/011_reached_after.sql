-- plait schema for PostgreSQL, version 11: which steps a step was reached after.
-- description: steps remember which step outcomes the workflow had received when it reached them
--
-- When a code workflow reaches a step, the keys of the steps whose outcomes the reaching
-- task had received by then are stored with it (a JSON list), so a run can be drawn as
-- it ran: one step after another, or side by side after the same step (a gather). The
-- column is the last of the steps row type, in StepRow's field order, so it rides in the
-- step's first write (put_step inserts the whole row); put_step's update leaves it as it
-- was. NULL: recorded before version 11, or a step of a graph workflow.

ALTER TABLE @schema@.steps ADD COLUMN reached_after jsonb;
